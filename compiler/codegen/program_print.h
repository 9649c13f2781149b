/*
 * program_print.h: a native program as readable text.
 */
#ifndef GC_CODEGEN_PROGRAM_PRINT_H
#define GC_CODEGEN_PROGRAM_PRINT_H

#include "compiler/arena.h"
#include "compiled/v1/artifact.pb-c.h"

/* Values with their placements, instructions and outputs of `p`, one per
 * line, in the arena; NULL when out of memory. */
char *gc_native_program_str(gc_arena *a, const Compiled__V1__NativeProgram *p);

#endif
