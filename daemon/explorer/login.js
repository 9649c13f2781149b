// login.js: says so when the previous try failed (?failed=1).
window.addEventListener('DOMContentLoaded', () => {
  if (new URLSearchParams(location.search).get('failed')) document.getElementById('failed').hidden = false;
  document.getElementById('token').focus();
});
