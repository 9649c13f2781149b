/*
 * test_plan.c: the memory planner (compiler/sched/plan.c) on loop IR built
 * by hand (tests/lib/irbuild.h) and scheduled: two buffers live at the same
 * kernel never share a byte, a dead buffer's bytes are reused, the arena's
 * size on a known chain is its peak of live bytes, a pointwise node writes
 * over an input that dies in its kernel, and large intermediates become
 * TEMP buffers when asked.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/ir/ir.h"
#include "compiler/sched/sched.h"
#include "tests/lib/irbuild.h"
#include "tests/lib/testutil.h"

static ir_graph *const ir = &ib_ir;
static sc_schedule S;

#define T(name) Test(plan, name, .init = ib_setup, .fini = ib_teardown)

static const gc_dtype F32 = GC_DTYPE_FLOAT32, F64 = GC_DTYPE_FLOAT64;
static const int64_t S48[2] = {4, 8}, S84[2] = {8, 4};

static void schedule(void) {
  ib_schedule(ir, &S);
}

/* The buffers that own arena memory: never two live at one kernel whose
 * bytes overlap; each 64-byte aligned, inside the arena, whose size is the
 * largest end. */
static void plan(void) {
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(sc_plan_memory(ir, &S, &err), 0, "%s", err.msg);
  cr_assert(S.planned);
  int64_t end = 0;
  for (int i = 0; i < ir->nbufs; i++) {
    const ir_buf *p = ir->bufs[i];
    if (p->kind != IR_BUF_ARENA || S.local[i] || p->first < 0 || p->share)
      continue;
    int64_t pe = p->arena_offset + sc_buf_bytes(p);
    cr_assert_eq(p->arena_offset % 64, 0, "buf%d at %lld", i,
                 (long long)p->arena_offset);
    cr_assert_leq(pe, S.arena_bytes, "buf%d ends past the arena", i);
    if (pe > end)
      end = pe;
    for (int j = 0; j < i; j++) {
      const ir_buf *q = ir->bufs[j];
      if (q->kind != IR_BUF_ARENA || S.local[j] || q->first < 0 || q->share)
        continue;
      bool live_together = p->first <= q->last && q->first <= p->last;
      bool bytes_overlap =
          p->arena_offset < q->arena_offset + sc_buf_bytes(q) &&
          q->arena_offset < pe;
      cr_assert_not(live_together && bytes_overlap,
                    "buf%d [%d, %d] at %lld and buf%d [%d, %d] at %lld", i,
                    p->first, p->last, (long long)p->arena_offset, j, q->first,
                    q->last, (long long)q->arena_offset);
    }
  }
  cr_assert_eq(S.arena_bytes, end);
}

/* f(b) read transposed: a [cols, rows] node over b's [rows, cols] (a kernel
 * of its own: it reads other elements than it writes), of dtype dt. */
static ir_node *transposed(ir_buf *b, gc_dtype dt) {
  int64_t sz[2] = {b->sizes[1], b->sizes[0]};
  ir_node *n = ib_pointwise(ir, dt, 2, sz);
  gc_sym *at =
      gc_sym_add(&ir->sym, gc_sym_scale(&ir->sym, n->vars[1], b->strides[0]),
                 gc_sym_scale(&ir->sym, n->vars[0], b->strides[1]));
  n->body = ir_cast(ir, ir_load(ir, b, at), dt);
  ib_append(ir, n);
  return n;
}

/* n's buffer becomes program output 0 (allocated per call: no arena). */
static ir_node *output(ir_node *n) {
  n->out->kind = IR_BUF_OUTPUT;
  n->out->index = 0;
  return n;
}

static ir_node *exp_of(ir_buf *b) {
  ir_node *n = ib_pointwise(ir, b->dtype, b->rank, b->sizes);
  n->body = ir_op1(ir, IR_EXP, b->dtype, ib_read(ir, n, b));
  ib_append(ir, n);
  return n;
}

T(a_chain_reuses_dead_buffers_and_needs_its_peak) {
  /* A -> B -> C -> D -> output, each read only by the next (one kernel
   * each):
   *   A f32[4, 8] 128 B, live at kernels 0-1
   *   B f32[8, 4] 128 B, 1-2
   *   C f64[4, 8] 256 B, 2-3
   *   D f32[8, 4] 128 B, 3-4
   * The peak is B + C = 384 bytes at kernel 2 (C + D at 3). */
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *A = exp_of(x);
  ir_node *B = transposed(A->out, F32);
  ir_node *C = transposed(B->out, F64);
  ir_node *D = transposed(C->out, F32);
  output(transposed(D->out, F32));
  schedule();
  cr_assert_eq(S.nkernels, 5);
  plan();
  cr_assert_eq(A->out->first, 0);
  cr_assert_eq(A->out->last, 1);
  cr_assert_eq(C->out->first, 2);
  cr_assert_eq(C->out->last, 3);
  cr_assert_eq(S.arena_bytes, 384, "the peak of live bytes");
  /* largest first: C at 0; A (dead before C is written) in the same
   * bytes; B beside both; D, live with C after B died, in B's bytes */
  cr_assert_eq(C->out->arena_offset, 0);
  cr_assert_eq(A->out->arena_offset, 0, "A reuses the bytes C gets later");
  cr_assert_eq(B->out->arena_offset, 256);
  cr_assert_eq(D->out->arena_offset, 256, "D reuses dead B's bytes");
}

T(buffers_live_together_get_separate_bytes) {
  /* A is read by B and, two kernels later, by E (fused with C, E an
   * output): A and B live at kernel 2, C local */
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *A = exp_of(x);
  ir_node *B = transposed(A->out, F32);
  ir_node *C = transposed(B->out, F32);
  ir_node *E = ib_pointwise(ir, F32, 2, S48);
  E->body = ir_op2(ir, IR_ADD, F32, ib_read(ir, E, C->out),
                   ir_load(ir, A->out, gc_sym_const(&ir->sym, 31)));
  ib_append(ir, E);
  output(E);
  schedule();
  plan();
  cr_assert_eq(A->out->last, S.place[E->id].kernel->id);
  cr_assert_eq(B->out->last, S.place[E->id].kernel->id);
  cr_assert_neq(A->out->arena_offset, B->out->arena_offset);
  cr_assert(S.local[C->out->id], "read by E at the element just written");
  cr_assert_eq(S.arena_bytes, 2 * 128, "A and B live at kernel 2");
}

T(a_pointwise_node_writes_over_an_input_dying_in_its_kernel) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *A = exp_of(x);
  ir_node *other = exp_of(ib_input(ir, 1, F32, 2, S84)); /* a kernel between */
  ir_node *C = exp_of(A->out);                           /* A's last reader */
  output(transposed(C->out, F32));
  schedule();
  cr_assert_eq(S.nkernels, 4);
  plan();
  cr_assert_eq(C->out->share, A->out, "C is computed in A's memory");
  cr_assert(A->out->shared);
  cr_assert_eq(ir_buf_storage(C->out), A->out);
  cr_assert_eq(C->out->arena_offset, A->out->arena_offset);
  cr_assert(S.local[other->out->id], "never read: never in memory");
  cr_assert_eq(S.arena_bytes, 128, "A's bytes hold C too");
  cr_assert_eq(A->out->last, 3, "A's range covers C's, read at kernel 3");
}

T(an_input_read_elsewhere_is_not_overwritten) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *A = exp_of(x);
  exp_of(ib_input(ir, 1, F32, 2, S84));
  ir_node *C = ib_pointwise(ir, F32, 2, S48); /* reads A's first element */
  C->body = ir_load(ir, A->out, gc_sym_const(&ir->sym, 0));
  ib_append(ir, C);
  output(transposed(C->out, F32));
  schedule();
  plan();
  cr_assert_null(C->out->share);
  cr_assert_neq(C->out->arena_offset, A->out->arena_offset);
}

T(large_intermediates_become_temporaries_when_asked) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *A = exp_of(x);
  ir_node *B = transposed(A->out, F32);
  ir_node *C = transposed(B->out, F64);
  output(transposed(C->out, F32));
  schedule();
  S.temp_min_bytes = 256;
  plan();
  cr_assert_eq(A->out->kind, IR_BUF_ARENA);
  cr_assert_eq(B->out->kind, IR_BUF_ARENA);
  cr_assert_eq(C->out->kind, IR_BUF_TEMP, "256 bytes: its own memory");
  cr_assert_eq(S.arena_bytes, 256, "A and B only");
}

/* Without separate temporaries (an inference program), a buffer of
 * SC_TEMP_MIN_BYTES or more still gets its own memory for its live range:
 * in the arena, which lives for the whole call, a large buffer read only
 * by the first kernels would be held through all the later ones (a
 * network's input copied to channels-last for its first convolution). The
 * arena then holds only the small buffers: here the peak of the live ones
 * that stay in it, computed from their sizes, not the large one's. */
T(large_intermediates_get_their_own_memory_in_any_program) {
  const int64_t big[2] = {512, 1024}; /* f32: 2 MiB */
  ir_buf *x = ib_input(ir, 0, F32, 2, big);
  ir_node *A = exp_of(x);                     /* 2 MiB, live at kernels 0-1 */
  ir_node *B = transposed(A->out, F32);       /* 2 MiB [1024, 512], 1-2 */
  ir_node *C = ib_pointwise(ir, F32, 2, S48); /* 128 B from B, 2-3 */
  C->body = ir_load(ir, B->out, gc_sym_const(&ir->sym, 7));
  ib_append(ir, C);
  ir_node *D = transposed(C->out, F32); /* 128 B, 3-4 */
  output(transposed(D->out, F32));
  schedule();
  S.temp_min_bytes = 0;
  plan();
  cr_assert_geq(sc_buf_bytes(A->out), SC_TEMP_MIN_BYTES);
  cr_assert_eq(A->out->kind, IR_BUF_TEMP, "2 MiB: its own memory");
  cr_assert_eq(B->out->kind, IR_BUF_TEMP, "2 MiB: its own memory");
  cr_assert_eq(C->out->kind, IR_BUF_ARENA);
  cr_assert_eq(D->out->kind, IR_BUF_ARENA);
  int64_t small = sc_buf_bytes(C->out) + sc_buf_bytes(D->out);
  cr_assert_eq(S.arena_bytes, small, "C and D, live together at kernel 3");
}

/* Random graphs: every node reads one or two earlier buffers (at element
 * 0: it starts a kernel) and writes a buffer of a random size. The plan
 * never overlaps two live buffers (plan() checks), and reuses memory: the
 * arena is below the sum of the buffers whenever two are never live
 * together. */
T(random_graphs_never_overlap_live_buffers) {
  tu_rng r;
  tu_rng_seed(&r, 40);
  for (int round = 0; round < 30; round++) {
    ib_teardown();
    ib_setup();
    ir_buf *bufs[64];
    int nb = 0;
    bufs[nb++] = ib_input(ir, 0, F32, 1, (int64_t[]){1 + tu_rng_below(&r, 99)});
    int nodes = 4 + tu_rng_below(&r, 40);
    for (int i = 0; i < nodes; i++) {
      int64_t size = 1 + tu_rng_below(&r, 300);
      gc_dtype dt = tu_rng_below(&r, 2) ? F32 : F64;
      ir_node *n = ib_pointwise(ir, dt, 1, &size);
      ir_buf *p = bufs[nb - 1 - tu_rng_below(&r, nb < 6 ? nb : 6)];
      ir_buf *q = bufs[tu_rng_below(&r, nb)];
      gc_sym *zero = gc_sym_const(&ir->sym, 0);
      n->body = ir_op2(ir, IR_ADD, dt, ir_cast(ir, ir_load(ir, p, zero), dt),
                       ir_cast(ir, ir_load(ir, q, zero), dt));
      bufs[nb++] = ib_append(ir, n);
    }
    schedule();
    plan();
    int64_t sum = 0;
    for (int i = 1; i < nb; i++)
      if (!S.local[bufs[i]->id] && !bufs[i]->share)
        sum += sc_buf_bytes(bufs[i]);
    cr_assert_leq(S.arena_bytes, sum);
  }
}
