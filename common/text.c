/*
 * text.c: small string helpers. See text.h.
 */
#include "common/text.h"

#include <ctype.h>
#include <string.h>

char *text_trim(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1]))
    *--e = '\0';
  return s;
}
