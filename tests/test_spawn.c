/*
 * test_spawn.c: common/spawn.c, the one place the daemon and compilectl
 * start programs: the first line of a program's output (the toolchain's
 * identity), its errors (cannot run, failed, silent, too slow: killed
 * with its process group), and spawn_start/spawn_wait as the daemon's C
 * compiler runs (a log file in a working directory, the time limit).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/spawn.h"

Test(spawn, first_line_of_the_output) {
  char out[64], why[256] = "";
  cr_assert_eq(spawn_first_line("printf", "first\nsecond\n", 10000, out,
                                sizeof out, why, sizeof why),
               0, "%s", why);
  cr_assert_str_eq(out, "first");
}

Test(spawn, a_program_that_does_not_exist) {
  char out[64], why[256] = "";
  cr_assert_eq(spawn_first_line("/nonexistent/cc", "--version", 10000, out,
                                sizeof out, why, sizeof why),
               -1);
  cr_assert(strstr(why, "cannot run '/nonexistent/cc --version'"), "%s", why);
}

Test(spawn, a_program_that_fails_or_says_nothing) {
  char out[64], why[256] = "";
  cr_assert_eq(spawn_first_line("false", "--version", 10000, out, sizeof out,
                                why, sizeof why),
               -1);
  cr_assert_str_eq(why, "'false --version' failed");
  cr_assert_eq(
      spawn_first_line("true", "x", 10000, out, sizeof out, why, sizeof why),
      -1, "no output is no identity");
}

Test(spawn, a_program_that_does_not_answer_is_killed) {
  char out[64], why[256] = "";
  cr_assert_eq(
      spawn_first_line("sleep", "30", 200, out, sizeof out, why, sizeof why),
      -1);
  cr_assert_str_eq(why, "'sleep 30' did not answer within 200 ms");
}

Test(spawn, start_and_wait_with_a_log_in_a_directory) {
  char dir[] = "/tmp/test_spawn-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
  spawn_io io = {.dir = dir, .log = "run.log"};
  pid_t pid;
  char why[256] = "";
  cr_assert_eq(spawn_start(argv, &io, &pid, why, sizeof why), 0, "%s", why);
  cr_assert_eq(spawn_wait(pid, "sh", 10000, why, sizeof why), 3);
  char path[128], text[64] = "";
  snprintf(path, sizeof path, "%s/run.log", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "the log is in the working directory");
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cr_assert_str_eq(text, "out\nerr\n");
  unlink(path);
  rmdir(dir);
}

Test(spawn, wait_kills_at_the_time_limit) {
  char *argv[] = {"sh", "-c", "sleep 30", NULL};
  spawn_io io = {.log = "/dev/null"};
  pid_t pid;
  char why[256] = "";
  cr_assert_eq(spawn_start(argv, &io, &pid, why, sizeof why), 0, "%s", why);
  cr_assert_eq(spawn_wait(pid, "sh", 200, why, sizeof why), -2);
  cr_assert_str_eq(why, "sh did not finish within 0 s (killed)");
}

Test(spawn, start_reports_what_cannot_run) {
  char *argv[] = {"/nonexistent/cc", NULL};
  spawn_io io = {.log = "/dev/null"};
  pid_t pid;
  char why[256] = "";
  cr_assert_neq(spawn_start(argv, &io, &pid, why, sizeof why), 0);
  cr_assert(strstr(why, "cannot run /nonexistent/cc"), "%s", why);
}
