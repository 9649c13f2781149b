/*
 * util.c: file I/O and graph loading for compilectl.
 */
#include "client/ctl/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/lib/pbjson.h"
#include "client/lib/pt2.h"

void ctl_errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("compilectl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int ctl_read_file(const char *path, uint8_t **data, size_t *len) {
  int fd =
      strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t cap = 1 << 16, used = 0;
  uint8_t *buf = malloc(cap);
  if (!buf)
    goto fail;
  for (;;) {
    if (used == cap) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb)
        goto fail;
      buf = nb;
      cap *= 2;
    }
    ssize_t n = read(fd, buf + used, cap - used);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      goto fail;
    }
    if (n == 0)
      break;
    used += (size_t)n;
  }
  if (fd != STDIN_FILENO)
    close(fd);
  *data = buf;
  *len = used;
  return 0;
fail : {
  int saved = errno;
  free(buf);
  if (fd != STDIN_FILENO)
    close(fd);
  errno = saved;
  return -1;
}
}

static int write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int ctl_write_file(const char *path, const void *data, size_t len) {
  if (strcmp(path, "-") == 0)
    return write_all(STDOUT_FILENO, data, len);
  size_t n = strlen(path) + 32;
  char *tmp = malloc(n);
  if (!tmp)
    return -1;
  snprintf(tmp, n, "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    free(tmp);
    return -1;
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0 || close(fd) != 0 ||
      rename(tmp, path) != 0) {
    int saved = errno;
    unlink(tmp);
    free(tmp);
    errno = saved;
    return -1;
  }
  free(tmp);
  return 0;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

ctl_format ctl_guess_format(const char *path, const uint8_t *data, size_t len) {
  if (ends_with(path, ".json"))
    return CTL_FMT_JSON;
  if (ends_with(path, ".pb"))
    return CTL_FMT_PB;
  for (size_t i = 0; i < len; i++) {
    if (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r')
      continue;
    return data[i] == '{' ? CTL_FMT_JSON : CTL_FMT_PB;
  }
  return CTL_FMT_PB;
}

int ctl_load_graph(const char *path, Compiled__V1__GraphModule **msg, char *err,
                   size_t errlen) {
  uint8_t *data;
  size_t len;
  if (ctl_read_file(path, &data, &len) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return CTL_EIO;
  }
  int rc = CTL_OK;
  if (pt2_looks_like_zip(data, len)) {
    /* a torch.export archive: converted to a graph (client/lib/pt2.c) */
    pt2_program *p;
    if (pt2_read(data, len, path, &p, err, errlen) != 0) {
      rc = CTL_EGRAPH;
    } else {
      *msg = p->graph;
      p->graph = NULL;
      pt2_free(p);
    }
  } else if (ctl_guess_format(path, data, len) == CTL_FMT_JSON) {
    char jerr[512];
    ProtobufCMessage *m = NULL;
    if (pbjson_decode_text(&compiled__v1__graph_module__descriptor,
                           (const char *)data, len, &m, jerr,
                           sizeof jerr) != 0) {
      snprintf(err, errlen, "%s: %s", path, jerr);
      rc = CTL_EGRAPH;
    } else {
      *msg = (Compiled__V1__GraphModule *)m;
    }
  } else {
    *msg = compiled__v1__graph_module__unpack(NULL, len, data);
    if (!*msg) {
      snprintf(err, errlen,
               "%s: not a valid GraphModule protobuf message (%zu bytes)", path,
               len);
      rc = CTL_EGRAPH;
    }
  }
  free(data);
  return rc;
}
