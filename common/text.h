/*
 * text.h: small string helpers the daemon (its config file) and the tests
 * (tests/lib/tgraph's graph notation) share.
 */
#ifndef COMMON_TEXT_H
#define COMMON_TEXT_H

/* `s` without leading and trailing white space: the trailing white space is
 * cut off in place (a NUL written over the first of it), and the result
 * points into `s`. */
char *text_trim(char *s);

#endif
