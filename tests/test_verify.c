/*
 * test_verify.c: the loop IR verifier (compiler/ir/verify.c) on IR built by
 * hand (tests/lib/irbuild.h). A well-formed graph passes; then each test
 * breaks one invariant the verifier states and expects its message, one
 * test per check, so that disabling any check fails a test here.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/ir/ir.h"
#include "tests/lib/irbuild.h"

static ir_graph *const ir = &ib_ir;

#define T(name) Test(verify, name, .init = ib_setup, .fini = ib_teardown)

static const gc_dtype F32 = GC_DTYPE_FLOAT32, F16 = GC_DTYPE_FLOAT16,
                      I64 = GC_DTYPE_INT64, I32 = GC_DTYPE_INT32;
static const int64_t S48[2] = {4, 8};

/* The verifier fails with `code` and a message containing `text`. */
static void expect_code(int code, const char *text) {
  gc_error err;
  gc_error_clear(&err);
  int rc = ir_verify(ir, &err);
  cr_assert_eq(rc, code, "verifier returned %d (%s), want %d", rc, err.msg,
               code);
  cr_assert(strstr(err.msg, text), "message \"%s\" lacks \"%s\"", err.msg,
            text);
}

static void expect(const char *text) {
  expect_code(GC_EINTERNAL, text);
}

static void expect_ok(void) {
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(ir_verify(ir, &err), 0, "%s", err.msg);
}

/* x: f32[4, 8] input 0 */
static ir_buf *input(void) {
  return ib_input(ir, 0, F32, 2, S48);
}

/* A node computing exp(b) over b's [4, 8], not yet appended. */
static ir_node *exp_of(ir_buf *b) {
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  n->body = ir_op1(ir, IR_EXP, F32, ib_read(ir, n, b));
  return n;
}

/* exp(x), appended: the well-formed node the tests break. */
static ir_node *good(void) {
  ir_node *n = exp_of(input());
  ib_append(ir, n);
  expect_ok();
  return n;
}

/* A strided view of all of b. */
static ir_view *view_of(ir_buf *b) {
  ir_view *v = gc_arena_zalloc(ir->a, sizeof *v);
  *v = (ir_view){.buf = b,
                 .rank = b->rank,
                 .sizes = b->sizes,
                 .strides = b->strides,
                 .ssizes = b->ssizes,
                 .sstrides = b->sstrides,
                 .soffset = gc_sym_const(&ir->sym, 0)};
  return v;
}

/* A call node of `kind` (SCAN, SCATTER, INTERP) writing a new arena buffer
 * of `dt`[sizes] with room for four arguments (add_arg); not appended. */
static ir_node *call_node(ir_node_kind kind, gc_dtype dt, int rank,
                          const int64_t *sizes) {
  ir_node *n = ir_node_new(ir, kind);
  n->out = ir_buf_new(ir, IR_BUF_ARENA, dt, rank, sizes, NULL);
  n->args = gc_arena_calloc(ir->a, 4, sizeof *n->args);
  n->what = ir_node_kind_name(kind);
  cr_assert(n->out && n->args);
  return n;
}

static void add_arg(ir_node *n, const char *name, ir_buf *b) {
  ir_call_arg *c = &n->args[n->nargs++];
  c->name = name;
  c->arg.kind = GC_ARG_TENSOR;
  c->bufs = gc_arena_calloc(ir->a, 1, sizeof *c->bufs);
  c->views = gc_arena_calloc(ir->a, 1, sizeof *c->views);
  c->bufs[0] = b;
  c->views[0] = view_of(b);
}

/* ---- a graph that passes ---- */

T(accepts_pointwise_reduction_and_call) {
  ir_buf *x = input();
  ir_node *p = exp_of(x);
  ir_buf *e = ib_append(ir, p);
  ir_node *r = ib_reduction(ir, IR_RED_SUM, F32, 1, S48, 1, S48 + 1);
  r->body = ib_read(ir, r, e);
  ir_buf *s = ib_append(ir, r);
  ir_node *c = ib_call(ir, s, F32, 1, S48);
  ir_node *q = ib_pointwise(ir, F32, 1, S48);
  q->body =
      ir_op2(ir, IR_ADD, F32, ib_read(ir, q, c->results[0]), ib_read(ir, q, s));
  ib_append(ir, q);
  expect_ok();
}

/* ---- the graph as a whole ---- */

T(rejects_an_out_of_memory_graph) {
  good();
  ir->oom = true;
  expect_code(GC_ENOMEM, "loop IR: out of memory");
}

T(rejects_overflowed_index_arithmetic) {
  good();
  ir->sym.overflow = true;
  expect("index arithmetic overflowed");
}

T(rejects_a_symbolic_buffer_without_expressions) {
  ir_node *n = good();
  n->out->symbolic = true;
  n->out->sspan = NULL;
  expect("is symbolic without expressions");
}

T(rejects_a_buffer_over_the_size_limit) {
  good();
  ib_input(ir, 1, F32, 1, (int64_t[]){IR_MAX_BUF_BYTES / 4 + 1});
  expect("bytes a buffer may have");
}

T(rejects_a_node_id_that_is_not_its_position) {
  ir_node *n = good();
  n->id = 5;
  expect("its id is 5 at position 0");
}

/* ---- pointwise and reduction nodes ---- */

T(rejects_an_output_not_marked_as_written) {
  ir_node *n = good();
  n->out->def = NULL;
  expect("its output buffer is not marked as written by it");
}

T(rejects_an_iteration_space_of_another_rank) {
  ir_node *n = good();
  n->rank = 1;
  expect("iterates 1 dimensions, writes a rank-2 buffer");
}

T(rejects_a_range_that_is_not_the_buffer_size) {
  ir_node *n = good();
  gc_sym **sr = gc_arena_calloc(ir->a, 2, sizeof *sr);
  sr[0] = n->sranges[0];
  sr[1] = gc_sym_const(&ir->sym, 9);
  n->sranges = sr;
  expect("range 1 is 9, the buffer's size 8");
}

T(rejects_a_node_without_body) {
  ir_node *n = good();
  n->body = NULL;
  expect("no body");
}

T(rejects_a_body_of_another_dtype) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, GC_DTYPE_FLOAT64, 2, S48);
  n->body = ib_read(ir, n, x);
  ib_append(ir, n);
  expect("body is float32, the buffer float64");
}

T(rejects_a_half_reduction) {
  ir_buf *x = input();
  ir_node *r = ib_reduction(ir, IR_RED_SUM, F16, 1, S48, 1, S48 + 1);
  r->body = ib_read(ir, r, x);
  ib_append(ir, r);
  expect("a reduction of float16 values");
}

/* ---- loads ---- */

T(rejects_a_gather_without_index) {
  ir_buf *x = input(), *ix = ib_input(ir, 1, I64, 2, S48);
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  ir_expr *g = ir_gather(ir, x, gc_sym_const(&ir->sym, 0), ib_read(ir, n, ix),
                         1, 32, false);
  cr_assert_not_null(g);
  g->args[0] = NULL;
  n->body = g;
  ib_append(ir, n);
  expect("gather lacks its index");
}

T(rejects_a_gather_index_not_int64) {
  ir_buf *x = input(), *ix = ib_input(ir, 1, I32, 2, S48);
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  ir_expr *g = ir_gather(ir, x, gc_sym_const(&ir->sym, 0), ib_read(ir, n, ix),
                         1, 32, false);
  cr_assert_not_null(g);
  g->args[0] = ib_read(ir, n, ix); /* the int32 load, uncast */
  n->body = g;
  ib_append(ir, n);
  expect("gather index must be int64");
}

T(rejects_a_load_from_an_unknown_buffer) {
  ir_graph other;
  cr_assert_eq(ir_graph_init(&other, ir->a, NULL), 0);
  ir_buf *stranger = ir_buf_new(&other, IR_BUF_INPUT, F32, 2, S48, NULL);
  input(); /* buf0 of this graph, not `stranger` */
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  n->body = ir_load(ir, stranger, ib_at(ir, n, stranger));
  ib_append(ir, n);
  expect("load from an unknown buffer");
}

T(rejects_a_load_of_an_empty_buffer_in_a_loop_that_runs) {
  ir_buf *e = ib_input(ir, 0, F32, 1, (int64_t[]){0});
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  n->body = ir_load(ir, e, gc_sym_const(&ir->sym, 0));
  ib_append(ir, n);
  expect("load of buf0, which has no element, in a loop that runs");
}

T(rejects_a_load_outside_the_buffer) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  n->body = ir_load(ir, x, gc_sym_addc(&ir->sym, ib_at(ir, n, x), 1));
  ib_append(ir, n);
  expect("load of buf0 at index range [1, 32] outside [0, 32)");
}

T(rejects_a_load_with_another_loops_variable) {
  ir_buf *x = input();
  ir_node *m = exp_of(x);
  ib_append(ir, m);
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  n->body = ib_read(ir, m, x); /* m's variables */
  ib_append(ir, n);
  expect("load of buf0 uses a variable of another loop");
}

T(rejects_a_read_before_the_write) {
  ir_buf *x = input();
  ir_node *later = exp_of(x);
  ir_node *n = exp_of(later->out);
  ib_append(ir, n);
  ib_append(ir, later);
  expect("reads buf1 before node 1 writes it");
}

T(rejects_an_index_with_another_loops_variable) {
  ir_node *m = good();
  ir_node *n = ib_pointwise(ir, I64, 2, S48);
  n->body = ir_index(ir, m->vars[0], I64);
  ib_append(ir, n);
  expect("index uses a variable of another loop");
}

T(rejects_an_operation_without_its_argument) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  ir_expr *e =
      ir_op2(ir, IR_ADD, F32, ib_read(ir, n, x), ir_const_f(ir, 2, F32));
  cr_assert_eq(e->op, IR_ADD);
  e->args[1] = NULL;
  n->body = e;
  ib_append(ir, n);
  expect("add lacks argument 1");
}

T(rejects_a_comparison_that_is_not_bool) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  ir_expr *v = ib_read(ir, n, x), *zero = ir_const_f(ir, 0, F32);
  ir_expr *c = ir_op2(ir, IR_LT, GC_DTYPE_BOOL, v, zero);
  cr_assert_eq(c->op, IR_LT);
  n->body = ir_op3(ir, IR_WHERE, F32, c, zero, v);
  c->dtype = F32;
  ib_append(ir, n);
  expect("lt must be bool");
}

T(rejects_arithmetic_on_half_values) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, F16, 2, S48);
  ir_expr *v = ib_read(ir, n, x);
  n->body = ir_op2(ir, IR_MUL, F32, v, v);
  cr_assert_eq(n->body->op, IR_MUL);
  n->body->dtype = F16; /* ir_op2 itself computes half values as float32 */
  ib_append(ir, n);
  expect("mul of float16 values: half values are computed with as float32");
}

T(rejects_a_half_where_mixing_dtypes) {
  ir_buf *h = ib_input(ir, 0, F16, 2, S48);
  ir_node *n = ib_pointwise(ir, F16, 2, S48);
  ir_expr *v = ib_read(ir, n, h);
  ir_expr *c = ir_op2(ir, IR_LT, GC_DTYPE_BOOL, ir_cast(ir, v, F32),
                      ir_const_f(ir, 0, F32));
  ir_expr *w = ir_op3(ir, IR_WHERE, F16, c, v, ir_const_f(ir, 1, F16));
  cr_assert_eq(w->op, IR_WHERE);
  w->args[2] = ir_const_f(ir, 1, F32);
  n->body = w;
  ib_append(ir, n);
  expect("where of float16 values mixes dtypes");
}

T(rejects_an_expression_nested_too_deep) {
  ir_buf *x = input();
  ir_node *n = ib_pointwise(ir, F32, 2, S48);
  ir_expr *e = ib_read(ir, n, x);
  for (int i = 0; i < 10050; i++)
    e = ir_op1(ir, IR_EXP, F32, e);
  n->body = e;
  ib_append(ir, n);
  expect("expression nested too deep");
}

/* ---- symbolic sizes ---- */

/* s0 >= 2, x: f32[s0] input 0, and a node over [s0], not appended. */
static ir_node *sym_node(ir_buf **x) {
  gc_sym *s0 = gc_sym_sizevar(&ir->sym, "s0", 2, 1 << 20);
  ir->syms = gc_arena_calloc(ir->a, 1, sizeof *ir->syms);
  ir->syms[0] = s0;
  ir->nsyms = 1;
  gc_sym *one = gc_sym_const(&ir->sym, 1);
  *x = ir_buf_new_s(ir, IR_BUF_INPUT, F32, 1, &s0, &one);
  ir_buf *o = ir_buf_new_s(ir, IR_BUF_ARENA, F32, 1, &s0, &one);
  ir_node *n = ir_node_new(ir, IR_POINTWISE);
  cr_assert(*x && o && n && (*x)->symbolic);
  n->out = o;
  n->rank = 1;
  n->ranges = o->sizes;
  n->sranges = o->ssizes;
  n->vars = gc_arena_calloc(ir->a, 1, sizeof *n->vars);
  n->vars[0] = gc_sym_loopvar(&ir->sym, "i", s0);
  n->what = "symbolic";
  return n;
}

T(accepts_a_symbolic_load_inside) {
  ir_buf *x;
  ir_node *n = sym_node(&x);
  n->body = ir_load(ir, x, n->vars[0]);
  ib_append(ir, n);
  expect_ok();
}

T(rejects_a_symbolic_load_not_provably_inside) {
  ir_buf *x;
  ir_node *n = sym_node(&x);
  n->body = ir_load(ir, x, gc_sym_addc(&ir->sym, n->vars[0], 1));
  ib_append(ir, n);
  expect("not provably inside [0, s0) at every size");
}

T(rejects_a_gather_of_a_symbolic_buffer) {
  ir_buf *x;
  ir_node *n = sym_node(&x);
  n->body = ir_gather(ir, x, gc_sym_const(&ir->sym, 0), ir_const_i(ir, 0, I64),
                      1, 1, false);
  ib_append(ir, n);
  expect("gather of buf0 with symbolic sizes");
}

T(rejects_a_symbolic_load_with_another_loops_variable) {
  ir_buf *x;
  ir_node *m = sym_node(&x);
  m->body = ir_load(ir, x, m->vars[0]);
  ib_append(ir, m);
  ir_node *n = ir_node_new(ir, IR_POINTWISE);
  *n = *m;
  n->out =
      ir_buf_new_s(ir, IR_BUF_ARENA, F32, 1, m->out->ssizes, m->out->sstrides);
  n->vars = gc_arena_calloc(ir->a, 1, sizeof *n->vars);
  n->vars[0] = gc_sym_loopvar(&ir->sym, "j", ir->syms[0]);
  n->sranges = n->out->ssizes;
  ib_append(ir, n); /* its body reads x at m's variable */
  expect("load of buf0 uses a variable of another loop");
}

T(rejects_a_symbolic_read_before_the_write) {
  ir_buf *x;
  ir_node *later = sym_node(&x);
  later->body = ir_load(ir, x, later->vars[0]);
  ir_node *n = ir_node_new(ir, IR_POINTWISE);
  *n = *later;
  n->out = ir_buf_new_s(ir, IR_BUF_ARENA, F32, 1, later->out->ssizes,
                        later->out->sstrides);
  n->sranges = n->out->ssizes;
  n->body = ir_load(ir, later->out, n->vars[0]);
  ib_append(ir, n);
  ib_append(ir, later);
  expect("reads buf1 before node 1 writes it");
}

/* ---- calls ---- */

T(rejects_a_call_reading_a_buffer_before_it_is_written) {
  ir_buf *x = input();
  ir_node *later = exp_of(x);
  ib_call(ir, later->out, F32, 2, S48);
  ib_append(ir, later);
  expect("argument self reads buf1 before it is written");
}

T(rejects_a_generated_scan_of_half_values) {
  ir_buf *h = ib_input(ir, 0, F16, 2, S48);
  ir_node *n = call_node(IR_SCAN, F16, 2, S48);
  n->scan.op = IR_SCAN_SUM;
  n->scan.dim = 1;
  add_arg(n, "self", h);
  ib_append(ir, n);
  expect("generated scans, scatters and interpolations take no half values");
}

/* cumsum(x, dim 1) as generated code makes it */
static ir_node *scan(ir_buf *x) {
  ir_node *n = call_node(IR_SCAN, F32, 2, S48);
  n->scan.op = IR_SCAN_SUM;
  n->scan.dim = 1;
  add_arg(n, "self", x);
  return n;
}

T(accepts_a_scan) {
  ib_append(ir, scan(input()));
  expect_ok();
}

static const char *const SCAN_NEEDS =
    "a scan needs a self view, and indices exactly when it is cummax or "
    "cummin";

T(rejects_a_scan_without_self) {
  ir_node *n = scan(input());
  n->args[0].name = "other";
  ib_append(ir, n);
  expect(SCAN_NEEDS);
}

/* scan(input) as `op`, with int64 indices when `indices`; appended */
static void append_scan(ir_scan_op op, bool indices) {
  ir_node *n = scan(input());
  n->scan.op = op;
  if (indices)
    n->out2 = ir_buf_new(ir, IR_BUF_ARENA, I64, 2, S48, NULL);
  ib_append(ir, n);
}

T(rejects_a_cumsum_with_indices) {
  append_scan(IR_SCAN_SUM, true);
  expect(SCAN_NEEDS);
}

T(rejects_a_cummax_without_indices) {
  append_scan(IR_SCAN_MAX, false);
  expect(SCAN_NEEDS);
}

T(accepts_a_cummax_with_indices) {
  append_scan(IR_SCAN_MAX, true);
  expect_ok();
}

T(rejects_a_cummax_reading_another_dtype) {
  ir_node *n = call_node(IR_SCAN, F32, 2, S48);
  n->scan.op = IR_SCAN_MIN;
  n->scan.dim = 0;
  n->out2 = ir_buf_new(ir, IR_BUF_ARENA, I64, 2, S48, NULL);
  add_arg(n, "self", ib_input(ir, 0, I64, 2, S48));
  ib_append(ir, n);
  expect("a cummax/cummin scan reads int64 values into a float32 buffer");
}

T(rejects_a_scan_of_an_unknown_operation) {
  ir_node *n = scan(input());
  n->scan.op = (ir_scan_op)7;
  ib_append(ir, n);
  expect("scan operation 7");
}

T(rejects_a_scan_with_a_loop_body) {
  ir_node *n = scan(input());
  n->body = ir_const_f(ir, 0, F32);
  ib_append(ir, n);
  expect("a scan node has no loop body, iteration space or other output");
}

T(rejects_a_scan_writing_a_call_result) {
  ir_node *n = scan(input());
  n->out = ir_buf_new(ir, IR_BUF_RESULT, F32, 2, S48, NULL);
  ib_append(ir, n);
  expect("a scan node writes a buffer of the program's (out=)");
}

T(rejects_a_scan_along_a_dim_it_lacks) {
  ir_node *n = scan(input());
  n->scan.dim = 2;
  ib_append(ir, n);
  expect("scans dim 2 of a rank-2 buffer reading a rank-2 view");
}

T(rejects_a_scan_of_another_size) {
  ir_node *n = scan(ib_input(ir, 0, F32, 2, (int64_t[]){4, 9}));
  ib_append(ir, n);
  expect("scan input size 1 is 9, the buffer's 8");
}

/* scatter_add(self, 1, index, src) over [4, 8] */
static ir_node *scatter(int64_t index_cols) {
  ir_node *n = call_node(IR_SCATTER, F32, 2, S48);
  n->scatter.op = IR_SCATTER_ADD;
  n->scatter.dim = 1;
  n->scatter.alpha = 1;
  add_arg(n, "self", input());
  add_arg(n, "index", ib_input(ir, 1, I64, 2, (int64_t[]){4, index_cols}));
  add_arg(n, "src", ib_input(ir, 2, F32, 2, S48));
  return n;
}

T(accepts_a_scatter) {
  ib_append(ir, scatter(8));
  expect_ok();
}

T(rejects_a_scatter_without_index) {
  ir_node *n = scatter(8);
  n->args[1].name = "indices";
  ib_append(ir, n);
  expect("a scatter needs a dim of its buffer, an index, a source, and self "
         "or a constant");
}

T(accepts_a_scatter_onto_a_constant) {
  ir_node *n = scatter(8);
  n->args[0].bufs = NULL; /* self is not read */
  n->args[0].views = NULL;
  n->scatter.fill = ir_const_f(ir, 0, F32);
  ib_append(ir, n);
  expect_ok();
}

T(rejects_a_scatter_onto_a_constant_that_reads_self) {
  ir_node *n = scatter(8);
  n->scatter.fill = ir_const_f(ir, 0, F32);
  ib_append(ir, n);
  expect("a scatter needs a dim of its buffer, an index, a source, and self "
         "or a constant (not both");
}

T(rejects_a_scatter_onto_a_constant_of_another_dtype) {
  ir_node *n = scatter(8);
  n->args[0].bufs = NULL;
  n->args[0].views = NULL;
  n->scatter.fill = ir_const_i(ir, 0, I64);
  ib_append(ir, n);
  expect("a scatter's base, self and source have its buffer's dtype");
}

T(rejects_a_scatter_of_a_source_of_another_dtype) {
  ir_node *n = scatter(8);
  n->args[2].bufs[0] = ib_input(ir, 3, I64, 2, S48);
  n->args[2].views[0] = view_of(n->args[2].bufs[0]);
  ib_append(ir, n);
  expect("a scatter's base, self and source have its buffer's dtype");
}

T(rejects_a_scatter_add_with_an_alpha) {
  ir_node *n = scatter(8);
  n->scatter.alpha = 2; /* only index_add scales */
  ib_append(ir, n);
  expect("a scatter node has odims, an alpha or a first dim it does not use");
}

T(rejects_a_scatter_of_an_unknown_operation) {
  ir_node *n = scatter(8);
  n->scatter.op = (ir_scatter_op)-1;
  ib_append(ir, n);
  expect("scatter operation -1");
}

T(rejects_a_scatter_whose_sizes_disagree) {
  ib_append(ir, scatter(9)); /* the index reaches past the source */
  expect("a scatter's self, index and source sizes disagree with its "
         "output's");
}

/* upsample_linear1d_backward: out [1, 2, in] from grad_output [1, 2, out],
 * each output position reading input positions i0 <= i1 */
static ir_node *interp(int64_t in, int64_t out, int64_t i1_last) {
  ir_node *n = call_node(IR_INTERP, F32, 3, (int64_t[]){1, 2, in});
  add_arg(n, "grad_output", ib_input(ir, 0, F32, 3, (int64_t[]){1, 2, out}));
  ir_interp *t = gc_arena_zalloc(ir->a, sizeof *t);
  t->in = in;
  t->out = out;
  t->i0 = gc_arena_calloc(ir->a, (size_t)out, 8);
  t->i1 = gc_arena_calloc(ir->a, (size_t)out, 8);
  t->l0 = gc_arena_calloc(ir->a, (size_t)out, 8);
  t->l1 = gc_arena_calloc(ir->a, (size_t)out, 8);
  for (int64_t o = 0; o < out; o++) {
    t->i0[o] = o * (in - 1) / (out > 1 ? out - 1 : 1);
    t->i1[o] = o == out - 1 ? i1_last : t->i0[o];
  }
  n->interp.axes = t;
  n->interp.naxes = 1;
  return n;
}

T(accepts_a_linear_upsampling_backward) {
  ib_append(ir, interp(3, 5, 2));
  expect_ok();
}

T(rejects_a_linear_upsampling_backward_without_grad_output) {
  ir_node *n = interp(3, 5, 2);
  n->args[0].name = "grad";
  ib_append(ir, n);
  expect("a linear upsampling backward needs a float32 or float64 rank-3 to "
         "5 buffer and a grad_output view");
}

T(rejects_a_linear_upsampling_backward_with_a_table_too_many) {
  ir_node *n = interp(3, 5, 2);
  n->interp.naxes = 2;
  ib_append(ir, n);
  expect("a linear upsampling backward of a rank-3 buffer has 2 axis tables");
}

T(rejects_a_linear_upsampling_backward_of_integers) {
  ir_node *n = call_node(IR_INTERP, I64, 3, (int64_t[]){1, 2, 3});
  add_arg(n, "grad_output", ib_input(ir, 0, I64, 3, (int64_t[]){1, 2, 5}));
  n->interp = interp(3, 5, 2)->interp;
  ib_append(ir, n);
  expect("a linear upsampling backward needs a float32 or float64");
}

T(rejects_a_linear_upsampling_backward_of_other_sizes) {
  ir_node *n = interp(3, 5, 2);
  n->interp.axes[0].out = 4;
  ib_append(ir, n);
  expect("linear upsampling backward dim 2: grad_output 5 (want 4)");
}

T(rejects_a_linear_upsampling_backward_reading_past_its_input) {
  ib_append(ir, interp(3, 5, 3));
  expect("linear upsampling backward dim 2: position 4 reads 2 and 3 of 3");
}
