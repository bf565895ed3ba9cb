/* The C ABI, exercised from C: every function, every reachable status code
 * with its message, the thread-local last error, and results checked against
 * a naive float64 computation written here. No test framework: a failed
 * check prints its line and the program exits nonzero. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsdpa/c_api.h"

/* The layouts every FFI binding relies on (c_api.h states them). */
_Static_assert(sizeof(fsdpa_tensor) == 88, "fsdpa_tensor layout");
_Static_assert(sizeof(fsdpa_options) == 48, "fsdpa_options layout");
_Static_assert(sizeof(fsdpa_tensors) == 392, "fsdpa_tensors layout");
_Static_assert(sizeof(fsdpa_plan_info) == 1336, "fsdpa_plan_info layout");

static int g_checks = 0;
static int g_failures = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    ++g_checks;                                                                     \
    if (!(condition)) {                                                             \
      ++g_failures;                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
    }                                                                               \
  } while (0)

/* Checks a status and that the last error starts with "fsdpa: " and
 * contains `text`. */
#define CHECK_ERROR(call, expected_status, text) \
  check_error((call), (expected_status), (text), __FILE__, __LINE__, #call)

static void check_error(fsdpa_status status, fsdpa_status expected, const char* text,
                        const char* file, int line, const char* call) {
  const char* message = fsdpa_last_error();
  ++g_checks;
  if (status != expected || message == NULL || strncmp(message, "fsdpa: ", 7) != 0 ||
      strstr(message, text) == NULL) {
    ++g_failures;
    fprintf(stderr,
            "%s:%d: %s\n  returned %d (%s), expected %d (%s)\n  last error: \"%s\"\n"
            "  expected it to contain: \"%s\"\n",
            file, line, call, (int)status, fsdpa_status_string(status), (int)expected,
            fsdpa_status_string(expected), message ? message : "(null)", text);
  }
}

/* ------------------------------------------------------------ random data */

static uint64_t g_random_state = 0;

static double random_uniform(void) { /* in [-1, 1) */
  g_random_state = g_random_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(g_random_state >> 11) / 4503599627370496.0 - 1.0;
}

static float* random_floats(size_t count) {
  float* data = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) data[i] = (float)random_uniform();
  return data;
}

static float* poisoned_floats(size_t count) {
  float* data = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) data[i] = NAN;
  return data;
}

/* ------------------------------------------------------------ views */

static fsdpa_tensor contiguous(void* data, int32_t dtype, int32_t rank, const int64_t* sizes) {
  fsdpa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device_type = FSDPA_DEVICE_CPU;
  t.device_index = 0;
  t.rank = rank;
  int64_t stride = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = stride;
    stride *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return t;
}

static fsdpa_tensor contiguous4(void* data, int32_t dtype, int64_t s0, int64_t s1, int64_t s2,
                                int64_t s3) {
  const int64_t sizes[4] = {s0, s1, s2, s3};
  return contiguous(data, dtype, 4, sizes);
}

static int64_t offset4(const fsdpa_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3];
}

/* Broadcast dims (size 1) read index 0. */
static double mask_at(const fsdpa_tensor* m, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t offset = offset4(m, m->sizes[0] == 1 ? 0 : b, m->sizes[1] == 1 ? 0 : h,
                                 m->sizes[2] == 1 ? 0 : i, m->sizes[3] == 1 ? 0 : j);
  if (m->dtype == FSDPA_DTYPE_BOOL) return ((const bool*)m->data)[offset] ? 1.0 : 0.0;
  return (double)((const float*)m->data)[offset];
}

/* ------------------------------------------------------------ naive reference */

/* Attention in float64 from f32 tensors of any strides, straight from the
 * definition in docs/design.md (Semantics). out_ref is [B, Hq, Lq, Dv], lse_ref [B, Hq, Lq]. */
static void naive_attention(const fsdpa_tensors* t, const fsdpa_options* o, double* out_ref,
                            double* lse_ref) {
  const fsdpa_tensor *q = &t->q, *k = &t->k, *v = &t->v;
  const int64_t B = q->sizes[0], Hq = q->sizes[1], Lq = q->sizes[2], Dqk = q->sizes[3];
  const int64_t Hkv = k->sizes[1], Lk = k->sizes[2], Dv = v->sizes[3];
  const double scale = o->has_scale ? o->scale : 1.0 / sqrt((double)Dqk);
  const float* qd = q->data;
  const float* kd = k->data;
  const float* vd = v->data;
  double* scores = malloc((size_t)(Lk > 0 ? Lk : 1) * sizeof(double));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t kv = h / (Hq / Hkv);
        const int64_t diagonal = i + (o->causal_align == FSDPA_CAUSAL_ALIGN_TOP_LEFT ? 0 : Lk - Lq);
        double row_max = -INFINITY;
        for (int64_t j = 0; j < Lk; ++j) {
          bool keep = true;
          double bias = 0.0;
          if (o->causal && j > diagonal) keep = false;
          if (o->has_window && j < diagonal - o->window_left) keep = false;
          if (t->mask) {
            if (t->mask->dtype == FSDPA_DTYPE_BOOL)
              keep = keep && mask_at(t->mask, b, h, i, j) != 0.0;
            else
              bias = mask_at(t->mask, b, h, i, j);
          }
          double dot = 0.0;
          for (int64_t d = 0; d < Dqk; ++d)
            dot += (double)qd[offset4(q, b, h, i, d)] * (double)kd[offset4(k, b, kv, j, d)];
          double score = scale * dot;
          if (o->softcap > 0.0) score = o->softcap * tanh(score / o->softcap);
          scores[j] = keep ? score + bias : -INFINITY;
          if (scores[j] > row_max) row_max = scores[j];
        }
        double sink = -INFINITY;
        if (t->sinks) sink = (double)((const float*)t->sinks->data)[h * t->sinks->strides[0]];
        if (sink > row_max) row_max = sink;
        double* out_row = out_ref + ((b * Hq + h) * Lq + i) * Dv;
        for (int64_t d = 0; d < Dv; ++d) out_row[d] = 0.0;
        if (row_max == -INFINITY) {
          lse_ref[(b * Hq + h) * Lq + i] = -INFINITY;
          continue;
        }
        double denominator = exp(sink - row_max);
        for (int64_t j = 0; j < Lk; ++j) {
          if (scores[j] == -INFINITY) continue;
          const double weight = exp(scores[j] - row_max);
          denominator += weight;
          for (int64_t d = 0; d < Dv; ++d)
            out_row[d] += weight * (double)vd[offset4(v, b, kv, j, d)];
        }
        for (int64_t d = 0; d < Dv; ++d) out_row[d] /= denominator;
        lse_ref[(b * Hq + h) * Lq + i] = row_max + log(denominator);
      }
  free(scores);
}

/* ||out - ref|| / ||ref|| over every element of out (read through its
 * strides); fails on an unwritten (NaN) element. Also checks lse. */
static void check_against_naive(const fsdpa_tensors* t, const fsdpa_options* o, double tolerance,
                                int line) {
  const fsdpa_tensor* out = &t->out;
  const int64_t B = out->sizes[0], Hq = out->sizes[1], Lq = out->sizes[2], Dv = out->sizes[3];
  double* out_ref = malloc((size_t)(B * Hq * Lq * Dv + 1) * sizeof(double));
  double* lse_ref = malloc((size_t)(B * Hq * Lq + 1) * sizeof(double));
  naive_attention(t, o, out_ref, lse_ref);
  double error = 0.0, norm = 0.0;
  int64_t unwritten = 0, lse_bad = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t row = (b * Hq + h) * Lq + i;
        for (int64_t d = 0; d < Dv; ++d) {
          const double got = (double)((const float*)out->data)[offset4(out, b, h, i, d)];
          const double want = out_ref[row * Dv + d];
          if (isnan(got)) ++unwritten;
          if (want == 0.0 && got != 0.0) ++unwritten; /* fully masked rows are exactly 0 */
          error += (got - want) * (got - want);
          norm += want * want;
        }
        if (t->lse) {
          const fsdpa_tensor* l = t->lse;
          const double got =
              (double)((const float*)
                           l->data)[b * l->strides[0] + h * l->strides[1] + i * l->strides[2]];
          const double want = lse_ref[row];
          if (isinf(want) ? !(isinf(got) && got < 0)
                          : !(fabs(got - want) <= 1e-5 * (1 + fabs(want))))
            ++lse_bad;
        }
      }
  const double relative = norm > 0 ? sqrt(error / norm) : sqrt(error);
  ++g_checks;
  if (!(relative <= tolerance) || unwritten != 0 || lse_bad != 0) {
    ++g_failures;
    fprintf(stderr,
            "%s:%d: result differs from the naive reference: relative error %.3g (tolerance "
            "%.1g), %lld unwritten or nonzero-masked elements, %lld bad lse values\n",
            __FILE__, line, relative, tolerance, (long long)unwritten, (long long)lse_bad);
  }
  free(out_ref);
  free(lse_ref);
}

/* ------------------------------------------------------------ a problem */

/* One attention problem with its buffers (f32). */
typedef struct problem {
  int64_t B, Hq, Hkv, Lq, Lk, Dqk, Dv;
  fsdpa_tensors tensors;
  fsdpa_tensor mask, sinks, lse;
  float *q, *k, *v, *out, *sinks_data, *lse_data, *mask_f32;
  bool* mask_bool;
} problem;

enum { MASK_NONE, MASK_BOOL_PER_HEAD, MASK_ADDITIVE_PER_BATCH };

static void problem_init(problem* p, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk,
                         int64_t Dqk, int64_t Dv, int mask_kind, bool sinks, bool lse,
                         bool bshd_layout) {
  memset(p, 0, sizeof *p);
  p->B = B, p->Hq = Hq, p->Hkv = Hkv, p->Lq = Lq, p->Lk = Lk, p->Dqk = Dqk, p->Dv = Dv;
  p->q = random_floats((size_t)(B * Hq * Lq * Dqk));
  p->k = random_floats((size_t)(B * Hkv * Lk * Dqk));
  p->v = random_floats((size_t)(B * Hkv * Lk * Dv));
  p->out = poisoned_floats((size_t)(B * Hq * Lq * Dv));
  if (bshd_layout) {
    /* Memory [B, L, H, D], viewed as [B, H, L, D]. */
    const int64_t qs[4] = {Lq * Hq * Dqk, Dqk, Hq * Dqk, 1};
    const int64_t ks[4] = {Lk * Hkv * Dqk, Dqk, Hkv * Dqk, 1};
    const int64_t vs[4] = {Lk * Hkv * Dv, Dv, Hkv * Dv, 1};
    const int64_t os[4] = {Lq * Hq * Dv, Dv, Hq * Dv, 1};
    p->tensors.q = contiguous4(p->q, FSDPA_DTYPE_F32, B, Hq, Lq, Dqk);
    p->tensors.k = contiguous4(p->k, FSDPA_DTYPE_F32, B, Hkv, Lk, Dqk);
    p->tensors.v = contiguous4(p->v, FSDPA_DTYPE_F32, B, Hkv, Lk, Dv);
    p->tensors.out = contiguous4(p->out, FSDPA_DTYPE_F32, B, Hq, Lq, Dv);
    memcpy(p->tensors.q.strides, qs, sizeof qs);
    memcpy(p->tensors.k.strides, ks, sizeof ks);
    memcpy(p->tensors.v.strides, vs, sizeof vs);
    memcpy(p->tensors.out.strides, os, sizeof os);
  } else {
    p->tensors.q = contiguous4(p->q, FSDPA_DTYPE_F32, B, Hq, Lq, Dqk);
    p->tensors.k = contiguous4(p->k, FSDPA_DTYPE_F32, B, Hkv, Lk, Dqk);
    p->tensors.v = contiguous4(p->v, FSDPA_DTYPE_F32, B, Hkv, Lk, Dv);
    p->tensors.out = contiguous4(p->out, FSDPA_DTYPE_F32, B, Hq, Lq, Dv);
  }
  if (mask_kind == MASK_BOOL_PER_HEAD) {
    /* [1, Hq, Lq, Lk], about 3 in 4 kept; the batch dim broadcasts. */
    p->mask_bool = malloc((size_t)(Hq * Lq * Lk + 1));
    for (int64_t i = 0; i < Hq * Lq * Lk; ++i) p->mask_bool[i] = random_uniform() > -0.5;
    p->mask = contiguous4(p->mask_bool, FSDPA_DTYPE_BOOL, 1, Hq, Lq, Lk);
    p->mask.strides[0] = 0;
    p->tensors.mask = &p->mask;
  } else if (mask_kind == MASK_ADDITIVE_PER_BATCH) {
    /* [B, 1, Lq, Lk] additive, some -inf. */
    p->mask_f32 = malloc((size_t)(B * Lq * Lk + 1) * sizeof(float));
    for (int64_t i = 0; i < B * Lq * Lk; ++i) {
      const double r = random_uniform();
      p->mask_f32[i] = r < -0.8 ? -INFINITY : (float)(2.0 * r);
    }
    p->mask = contiguous4(p->mask_f32, FSDPA_DTYPE_F32, B, 1, Lq, Lk);
    p->tensors.mask = &p->mask;
  }
  if (sinks) {
    p->sinks_data = random_floats((size_t)Hq);
    p->sinks = contiguous(p->sinks_data, FSDPA_DTYPE_F32, 1, &Hq);
    p->tensors.sinks = &p->sinks;
  }
  if (lse) {
    const int64_t sizes[3] = {B, Hq, Lq};
    p->lse_data = poisoned_floats((size_t)(B * Hq * Lq));
    p->lse = contiguous(p->lse_data, FSDPA_DTYPE_F32, 3, sizes);
    p->tensors.lse = &p->lse;
  }
}

static void problem_poison_outputs(problem* p) {
  for (int64_t i = 0; i < p->B * p->Hq * p->Lq * p->Dv; ++i) p->out[i] = NAN;
  if (p->lse_data)
    for (int64_t i = 0; i < p->B * p->Hq * p->Lq; ++i) p->lse_data[i] = NAN;
}

static void problem_free(problem* p) {
  free(p->q);
  free(p->k);
  free(p->v);
  free(p->out);
  free(p->sinks_data);
  free(p->lse_data);
  free(p->mask_f32);
  free(p->mask_bool);
}

static const double kF32Tolerance = 1e-5; /* docs/design.md (Tests and benchmarks) */

/* ------------------------------------------------------------ tests */

static void test_options_init(void) {
  const fsdpa_options a = fsdpa_options_init();
  const fsdpa_options b = FSDPA_OPTIONS_INIT;
  CHECK(a.has_scale == 0 && a.causal == 0 && a.has_window == 0 && a.allow_tf32 == 0);
  CHECK(a.causal_align == FSDPA_CAUSAL_ALIGN_BOTTOM_RIGHT);
  CHECK(a.policy == FSDPA_POLICY_DEFAULT);
  CHECK(a.has_scale == b.has_scale && a.causal == b.causal && a.causal_align == b.causal_align &&
        a.has_window == b.has_window && a.policy == b.policy && a.allow_tf32 == b.allow_tf32 &&
        a.softcap == 0.0 && b.softcap == 0.0);
}

static void test_attention_matches_naive(void) {
  static const int32_t policies[] = {FSDPA_POLICY_DEFAULT, FSDPA_POLICY_AUTO, FSDPA_POLICY_FUSED,
                                     FSDPA_POLICY_UNFUSED};
  for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; ++pi) {
    /* GQA 3:1, causal bottom-right, boolean mask broadcast over the batch,
     * sinks, lse, Dqk != Dv. */
    problem p;
    problem_init(&p, 2, 6, 2, 5, 9, 11, 7, MASK_BOOL_PER_HEAD, true, true, false);
    fsdpa_options o = fsdpa_options_init();
    o.causal = 1;
    o.policy = policies[pi];
    CHECK(fsdpa_attention(&p.tensors, &o, NULL) == FSDPA_OK);
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);

    /* Top-left causal with a window, additive mask per batch, explicit
     * scale, BSHD (transposed) layout. */
    problem_free(&p);
    problem_init(&p, 2, 4, 4, 7, 12, 16, 16, MASK_ADDITIVE_PER_BATCH, false, true, true);
    o = fsdpa_options_init();
    o.causal = 1;
    o.causal_align = FSDPA_CAUSAL_ALIGN_TOP_LEFT;
    o.has_window = 1;
    o.window_left = 3;
    o.has_scale = 1;
    o.scale = 0.3;
    o.policy = policies[pi];
    CHECK(fsdpa_attention(&p.tensors, &o, NULL) == FSDPA_OK);
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);
    /* The same call under a soft cap that bites (scores up to ~4). */
    o.softcap = 1.5;
    CHECK(fsdpa_attention(&p.tensors, &o, NULL) == FSDPA_OK);
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);

    /* Lq > Lk with bottom-right causal: the first Lq - Lk rows see no key,
     * so they are exactly 0 with lse = -inf. MQA (Hkv = 1). */
    problem_free(&p);
    problem_init(&p, 1, 3, 1, 9, 5, 8, 8, MASK_NONE, false, true, false);
    o = fsdpa_options_init();
    o.causal = 1;
    o.policy = policies[pi];
    CHECK(fsdpa_attention(&p.tensors, &o, NULL) == FSDPA_OK);
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);
    CHECK(p.out[0] == 0.0f && isinf(p.lse_data[0]) && p.lse_data[0] < 0);

    /* NULL options: the defaults. */
    problem_free(&p);
    problem_init(&p, 1, 2, 2, 3, 4, 5, 5, MASK_NONE, false, false, false);
    CHECK(fsdpa_attention(&p.tensors, NULL, NULL) == FSDPA_OK);
    o = fsdpa_options_init();
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);
    problem_free(&p);
  }
}

static void test_plan_and_run(void) {
  problem p;
  problem_init(&p, 2, 4, 2, 6, 10, 72, 64, MASK_BOOL_PER_HEAD, true, true, false);
  fsdpa_options o = fsdpa_options_init();
  o.causal = 1;
  o.policy = FSDPA_POLICY_AUTO;

  fsdpa_plan* plan = NULL;
  CHECK(fsdpa_plan_create(&p.tensors, &o, &plan) == FSDPA_OK);
  CHECK(plan != NULL);
  fsdpa_plan_info info;
  memset(&info, 0x5a, sizeof info);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  CHECK(info.backend == FSDPA_BACKEND_CPU);
  CHECK(info.path == FSDPA_PATH_FUSED_PREFILL || info.path == FSDPA_PATH_FUSED_DECODE);
  CHECK(info.policy == FSDPA_POLICY_AUTO);
  CHECK(info.dtype == FSDPA_DTYPE_F32);
  CHECK(info.device_type == FSDPA_DEVICE_CPU && info.device_index == 0);
  CHECK(info.mask == FSDPA_MASK_BOOLEAN);
  CHECK(info.has_sinks == 1 && info.has_lse == 1);
  CHECK(info.batch == 2 && info.heads_q == 4 && info.heads_kv == 2);
  CHECK(info.len_q == 6 && info.len_k == 10 && info.head_dim_qk == 72 && info.head_dim_v == 64);
  CHECK(fabs(info.scale - 1.0 / sqrt(72.0)) < 1e-15);
  CHECK(info.num_threads >= 1);
  CHECK(info.num_kv_splits >= 1);
  CHECK(info.pad_ratio >= 1.0);
  CHECK(info.head_dim_qk_bucket == 0 || info.head_dim_qk_bucket >= 72);
  CHECK(strlen(info.kernel) > 0 && strlen(info.kernel) < FSDPA_KERNEL_NAME_CAPACITY);
  CHECK(strcmp(info.fallback_reason, "") == 0);

  const char* explain = fsdpa_plan_explain(plan);
  CHECK(explain != NULL);
  if (explain) {
    CHECK(strstr(explain, info.kernel) != NULL);
    CHECK(strstr(explain, "B=2 Hq=4 Hkv=2 Lq=6 Lk=10 Dqk=72 Dv=64") != NULL);
    CHECK(strstr(explain, "causal=bottom-right") != NULL);
    CHECK(strstr(explain, "mask=boolean") != NULL);
    CHECK(strstr(explain, "backend   cpu") != NULL);
    CHECK(fsdpa_plan_explain(plan) == explain); /* stable until destroy */
  }

  /* Run the plan twice with the exact workspace; fresh outputs each time. */
  void* workspace = info.workspace_bytes ? malloc((size_t)info.workspace_bytes) : NULL;
  for (int repeat = 0; repeat < 2; ++repeat) {
    problem_poison_outputs(&p);
    CHECK(fsdpa_run(plan, &p.tensors, workspace, (size_t)info.workspace_bytes, NULL) == FSDPA_OK);
    check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);
  }

  /* Run-time errors: nothing is written. */
  problem_poison_outputs(&p);
  if (info.workspace_bytes > 0) {
    CHECK_ERROR(fsdpa_run(plan, &p.tensors, workspace, (size_t)info.workspace_bytes - 1, NULL),
                FSDPA_ERROR_INVALID_ARGUMENT, "workspace: ");
    CHECK_ERROR(fsdpa_run(plan, &p.tensors, NULL, (size_t)info.workspace_bytes, NULL),
                FSDPA_ERROR_INVALID_ARGUMENT, "workspace: null, the plan needs");
  }
  int not_a_stream = 0;
  CHECK_ERROR(fsdpa_run(plan, &p.tensors, workspace, (size_t)info.workspace_bytes, &not_a_stream),
              FSDPA_ERROR_INVALID_ARGUMENT, "stream: must be null for a CPU plan");
  fsdpa_tensors shorter = p.tensors;
  shorter.q.sizes[2] = 5;
  shorter.out.sizes[2] = 5;
  shorter.lse = NULL;
  shorter.mask = NULL;
  CHECK_ERROR(fsdpa_run(plan, &shorter, workspace, (size_t)info.workspace_bytes, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT,
              "tensors do not match the plan: len_q is 5, the plan was made for 6");
  fsdpa_tensors without_lse = p.tensors;
  without_lse.lse = NULL;
  CHECK_ERROR(fsdpa_run(plan, &without_lse, workspace, (size_t)info.workspace_bytes, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT, "tensors do not match the plan: lse is missing");
  CHECK_ERROR(fsdpa_run(plan, NULL, workspace, (size_t)info.workspace_bytes, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT, "fsdpa: tensors: null pointer");
  bool untouched = true;
  for (int64_t i = 0; i < p.B * p.Hq * p.Lq * p.Dv; ++i) untouched = untouched && isnan(p.out[i]);
  for (int64_t i = 0; i < p.B * p.Hq * p.Lq; ++i) untouched = untouched && isnan(p.lse_data[i]);
  CHECK(untouched);

  free(workspace);
  fsdpa_plan_destroy(plan);
  fsdpa_plan_destroy(NULL);

  /* Unfused policy: the unfused path, with the reason. */
  o.policy = FSDPA_POLICY_UNFUSED;
  CHECK(fsdpa_plan_create(&p.tensors, &o, &plan) == FSDPA_OK);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  CHECK(info.path == FSDPA_PATH_UNFUSED && info.policy == FSDPA_POLICY_UNFUSED);
  CHECK(strcmp(info.fallback_reason, "policy is unfused") == 0);
  CHECK(strstr(fsdpa_plan_explain(plan), "fallback  policy is unfused") != NULL);
  workspace = info.workspace_bytes ? malloc((size_t)info.workspace_bytes) : NULL;
  problem_poison_outputs(&p);
  CHECK(fsdpa_run(plan, &p.tensors, workspace, (size_t)info.workspace_bytes, NULL) == FSDPA_OK);
  check_against_naive(&p.tensors, &o, kF32Tolerance, __LINE__);
  free(workspace);
  fsdpa_plan_destroy(plan);

  /* FSDPA_POLICY steers FSDPA_POLICY_DEFAULT, and only it. */
  char* saved = getenv("FSDPA_POLICY") ? strdup(getenv("FSDPA_POLICY")) : NULL;
  setenv("FSDPA_POLICY", "unfused", 1);
  o.policy = FSDPA_POLICY_DEFAULT;
  CHECK(fsdpa_plan_create(&p.tensors, &o, &plan) == FSDPA_OK);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  CHECK(info.policy == FSDPA_POLICY_UNFUSED && info.path == FSDPA_PATH_UNFUSED);
  fsdpa_plan_destroy(plan);
  o.policy = FSDPA_POLICY_FUSED;
  CHECK(fsdpa_plan_create(&p.tensors, &o, &plan) == FSDPA_OK);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  CHECK(info.policy == FSDPA_POLICY_FUSED && info.path != FSDPA_PATH_UNFUSED);
  fsdpa_plan_destroy(plan);
  setenv("FSDPA_POLICY", "sometimes", 1);
  o.policy = FSDPA_POLICY_DEFAULT;
  plan = (fsdpa_plan*)&not_a_stream;
  CHECK_ERROR(fsdpa_plan_create(&p.tensors, &o, &plan), FSDPA_ERROR_INVALID_ARGUMENT,
              "FSDPA_POLICY: expected auto, fused or unfused, got 'sometimes'");
  CHECK(plan == NULL); /* cleared on failure */
  if (saved) {
    setenv("FSDPA_POLICY", saved, 1);
    free(saved);
  } else {
    unsetenv("FSDPA_POLICY");
  }
  problem_free(&p);
}

static void test_errors(void) {
  problem p;
  problem_init(&p, 1, 4, 2, 3, 5, 8, 8, MASK_NONE, false, false, false);
  fsdpa_options o = fsdpa_options_init();
  fsdpa_plan* plan = NULL;
  fsdpa_plan_info info;

  /* Null required pointers. */
  CHECK_ERROR(fsdpa_attention(NULL, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: tensors: null pointer");
  CHECK_ERROR(fsdpa_plan_create(NULL, &o, &plan), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: tensors: null pointer");
  CHECK_ERROR(fsdpa_plan_create(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: plan: null pointer");
  CHECK_ERROR(fsdpa_plan_get_info(NULL, &info), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: plan: null pointer");
  CHECK(fsdpa_plan_create(&p.tensors, &o, &plan) == FSDPA_OK);
  CHECK_ERROR(fsdpa_plan_get_info(plan, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: info: null pointer");
  fsdpa_plan_destroy(plan);
  CHECK_ERROR(fsdpa_run(NULL, &p.tensors, NULL, 0, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: plan: null pointer");
  CHECK(fsdpa_plan_explain(NULL) == NULL);
  CHECK_ERROR(FSDPA_ERROR_INVALID_ARGUMENT, FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: plan: null pointer");

  /* Validation messages of the C++ library, unchanged. */
  fsdpa_tensors t = p.tensors;
  t.k.sizes[1] = 3;
  t.v.sizes[1] = 3;
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "heads: heads_q=4 is not a multiple of heads_kv=3");
  o.has_scale = 1;
  o.scale = -1.0;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "scale: expected a finite value > 0, got -1");
  o.scale = NAN;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "scale: expected a finite value > 0, got nan");
  o = fsdpa_options_init();
  o.has_window = 1;
  o.window_left = -1;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "window_left: expected >= 0, got -1");
  /* Sizes and strides whose products overflow 64 bits: the element count
   * wraps to 0 (so a null-data check would pass), the extent wraps, a stride
   * of INT64_MAX. Each is a named error before anything is read. */
  {
    fsdpa_tensors wrapped = p.tensors;
    const int64_t big = (int64_t)1 << 59;
    wrapped.q.data = NULL;
    wrapped.q.sizes[0] = 1, wrapped.q.sizes[1] = 1, wrapped.q.sizes[2] = 32,
    wrapped.q.sizes[3] = big;
    wrapped.q.strides[0] = 0, wrapped.q.strides[1] = 0, wrapped.q.strides[2] = big;
    wrapped.q.strides[3] = 1;
    o = fsdpa_options_init();
    CHECK_ERROR(fsdpa_attention(&wrapped, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
                "q: sizes [1, 1, 32, 576460752303423488] with strides [0, 0, 576460752303423488, "
                "1] span more than 4503599627370496 bytes (2^52)");
    wrapped = p.tensors;
    wrapped.k.strides[2] = INT64_MAX;
    CHECK_ERROR(fsdpa_attention(&wrapped, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT, "k: sizes [");
    CHECK_ERROR(fsdpa_plan_create(&wrapped, &o, &plan), FSDPA_ERROR_INVALID_ARGUMENT,
                "span more than 4503599627370496 bytes (2^52) from dimension 2");
  }
  o = fsdpa_options_init();
  o.softcap = -2.0;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "softcap: expected a finite value >= 0 (0: none), got -2");
  o.softcap = NAN;
  CHECK_ERROR(fsdpa_plan_create(&p.tensors, &o, &plan), FSDPA_ERROR_INVALID_ARGUMENT,
              "softcap: expected a finite value >= 0 (0: none), got nan");

  /* Unknown enum values, small (checked by the C++ validation) and out of
   * the 8-bit range of the C++ enums (checked by the ABI). */
  o = fsdpa_options_init();
  o.policy = 7;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: policy: unknown value 7");
  o.policy = 256; /* would wrap to auto */
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: policy: unknown value 256");
  o.policy = -2;
  CHECK_ERROR(fsdpa_plan_create(&p.tensors, &o, &plan), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: policy: unknown value -2");
  o = fsdpa_options_init();
  o.causal_align = 2;
  CHECK_ERROR(fsdpa_attention(&p.tensors, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: causal_align: unknown value 2");
  o = fsdpa_options_init();
  t = p.tensors;
  t.q.dtype = 9;
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: q: unknown dtype value 9");
  t.q.dtype = 258; /* would wrap to f32 */
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: q: unknown dtype value 258");
  t = p.tensors;
  t.k.device_type = 5;
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: k: unknown device type value 5");
  t = p.tensors;
  t.v.rank = 3;
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: v: expected rank 4 [B, Hkv, Lk, Dv], got rank 3");
  t = p.tensors;
  t.out.data = p.q; /* out aliases q */
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "out: overlaps the memory of q");
  t = p.tensors;
  float sinks_data[3] = {0, 0, 0};
  const int64_t three = 3;
  fsdpa_tensor sinks = contiguous(sinks_data, FSDPA_DTYPE_F32, 1, &three);
  t.sinks = &sinks;
  CHECK_ERROR(fsdpa_attention(&t, &o, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "sinks: length is 3, expected heads_q=4");

  /* Unsupported: no fused kernel for head dim 1040 on CUDA (or, in a build
   * without CUDA, no CUDA backend at all). Planning reads no data, so host
   * pointers labelled CUDA are safe here. */
  problem big;
  problem_init(&big, 1, 1, 1, 1, 2, 1040, 1040, MASK_NONE, false, false, false);
  fsdpa_tensors cuda = big.tensors;
  cuda.q.device_type = cuda.k.device_type = cuda.v.device_type = cuda.out.device_type =
      FSDPA_DEVICE_CUDA;
  o = fsdpa_options_init();
  o.policy = FSDPA_POLICY_FUSED;
  if (!fsdpa_backend_built(FSDPA_BACKEND_CUDA)) {
    CHECK_ERROR(fsdpa_plan_create(&cuda, &o, &plan), FSDPA_ERROR_UNSUPPORTED,
                "fsdpa: no kernel: backend cuda is not built into this library");
    CHECK(plan == NULL);
    CHECK_ERROR(fsdpa_attention(&cuda, NULL, NULL), FSDPA_ERROR_UNSUPPORTED,
                "fsdpa: no kernel: backend cuda is not built into this library");
  } else {
    /* With the CUDA backend built, a fused row may read the device's
     * properties before it declines, which fails on a machine without a GPU
     * (DeviceError); with a GPU it declines the head dim. */
    const fsdpa_status status = fsdpa_plan_create(&cuda, &o, &plan);
    if (status == FSDPA_ERROR_DEVICE)
      CHECK_ERROR(status, FSDPA_ERROR_DEVICE, "fsdpa: CUDA");
    else
      CHECK_ERROR(status, FSDPA_ERROR_UNSUPPORTED, "fsdpa: no fused kernel");
    CHECK(plan == NULL);
    /* A device that does not exist: DeviceError where planning reads the
     * device (the CUDA suites check the launch-time errors). */
    cuda.q.device_index = cuda.k.device_index = cuda.v.device_index = cuda.out.device_index = 999;
    o.policy = FSDPA_POLICY_AUTO;
    const fsdpa_status missing = fsdpa_plan_create(&cuda, &o, &plan);
    if (missing == FSDPA_OK)
      printf("note: planning for cuda:999 reads no device property; DEVICE not reached here\n");
    else
      CHECK_ERROR(missing, FSDPA_ERROR_DEVICE, "fsdpa: CUDA device 999 does not exist");
    fsdpa_plan_destroy(plan);
    o.policy = FSDPA_POLICY_FUSED;
  }
  /* ForceFused on the CPU always has a kernel. */
  CHECK(fsdpa_attention(&big.tensors, &o, NULL) == FSDPA_OK);
  problem_free(&big);

  /* Internal: the unfused CPU path's workspace grows with Lk; with an empty
   * batch no data is read, so a key length whose workspace cannot be
   * allocated reaches std::bad_alloc safely. Checked only while the plan
   * asks for such a workspace. */
  fsdpa_tensors huge = p.tensors;
  const int64_t huge_len = (int64_t)1 << 47;
  huge.q.sizes[0] = huge.k.sizes[0] = huge.v.sizes[0] = huge.out.sizes[0] = 0;
  huge.k.sizes[2] = huge.v.sizes[2] = huge_len;
  huge.q.data = huge.k.data = huge.v.data = huge.out.data = NULL;
  o = fsdpa_options_init();
  o.policy = FSDPA_POLICY_UNFUSED;
  CHECK(fsdpa_plan_create(&huge, &o, &plan) == FSDPA_OK);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  fsdpa_plan_destroy(plan);
  if (getenv("FSDPA_TEST_NO_BAD_ALLOC")) /* valgrind aborts on a failed new */
    printf("note: FSDPA_ERROR_INTERNAL skipped (FSDPA_TEST_NO_BAD_ALLOC)\n");
  else if (info.workspace_bytes >= ((uint64_t)1 << 49))
    CHECK_ERROR(fsdpa_attention(&huge, &o, NULL), FSDPA_ERROR_INTERNAL,
                "fsdpa: out of memory (std::bad_alloc)");
  else
    printf("note: FSDPA_ERROR_INTERNAL not reached (unfused workspace does not grow with Lk)\n");

  /* Without the CUDA backend FSDPA_ERROR_DEVICE cannot be reached. */
  CHECK(strcmp(fsdpa_status_string(FSDPA_OK), "ok") == 0);
  CHECK(strcmp(fsdpa_status_string(FSDPA_ERROR_INVALID_ARGUMENT), "invalid argument") == 0);
  CHECK(strcmp(fsdpa_status_string(FSDPA_ERROR_UNSUPPORTED), "unsupported") == 0);
  CHECK(strcmp(fsdpa_status_string(FSDPA_ERROR_DEVICE), "device error") == 0);
  CHECK(strcmp(fsdpa_status_string(FSDPA_ERROR_INTERNAL), "internal error") == 0);
  CHECK(strcmp(fsdpa_status_string(42), "unknown status") == 0);

  /* A success does not clear the last error. */
  CHECK_ERROR(fsdpa_attention(NULL, NULL, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "tensors: null pointer");
  CHECK(fsdpa_attention(&p.tensors, NULL, NULL) == FSDPA_OK);
  CHECK(strcmp(fsdpa_last_error(), "fsdpa: tensors: null pointer") == 0);
  problem_free(&p);
}

/* ------------------------------------------------------------ threads */

typedef struct thread_result {
  int empty_at_start;
  int status;
  char message[256];
} thread_result;

static void* second_thread(void* argument) {
  thread_result* result = argument;
  result->empty_at_start = strcmp(fsdpa_last_error(), "") == 0;
  fsdpa_options o = fsdpa_options_init();
  o.policy = 99;
  float q[8] = {0}, k[8] = {0}, v[8] = {0}, out[8] = {0};
  fsdpa_tensors t;
  memset(&t, 0, sizeof t);
  t.q = contiguous4(q, FSDPA_DTYPE_F32, 1, 1, 1, 8);
  t.k = contiguous4(k, FSDPA_DTYPE_F32, 1, 1, 1, 8);
  t.v = contiguous4(v, FSDPA_DTYPE_F32, 1, 1, 1, 8);
  t.out = contiguous4(out, FSDPA_DTYPE_F32, 1, 1, 1, 8);
  result->status = fsdpa_attention(&t, &o, NULL);
  snprintf(result->message, sizeof result->message, "%s", fsdpa_last_error());
  return NULL;
}

/* A paged cache from C: k and v as page pools [pages, 4, Hkv, D] behind a
 * reversed block table, per-sequence lengths; the output equals the dense
 * ragged call on the same keys, bit for bit (the CPU paths load rows, then
 * compute alike), on both policies; the plan reports the cache. */
/* fsdpa_attention_data: the layout of one problem run on another's data
 * equals fsdpa_attention on that other problem, and leaves the layout's own
 * arrays alone. */
static void test_attention_on_other_data(void) {
  problem a, b;
  problem_init(&a, 2, 6, 2, 5, 9, 11, 7, MASK_BOOL_PER_HEAD, true, true, false);
  problem_init(&b, 2, 6, 2, 5, 9, 11, 7, MASK_BOOL_PER_HEAD, true, true, false);
  fsdpa_options o = fsdpa_options_init();
  o.causal = 1;
  const void* optional[5] = {b.mask_bool, b.sinks_data, b.lse_data, NULL, NULL};
  CHECK(fsdpa_attention_data(&a.tensors, b.q, b.k, b.v, b.out, optional, &o, NULL) == FSDPA_OK);
  check_against_naive(&b.tensors, &o, kF32Tolerance, __LINE__);
  CHECK(isnan(a.out[0]) && isnan(a.out[a.B * a.Hq * a.Lq * a.Dv - 1]) && isnan(a.lse_data[0]));
  CHECK_ERROR(fsdpa_attention_data(&a.tensors, b.q, b.k, b.v, b.out, NULL, &o, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT,
              "optional: null, but the layout has mask (its data goes in optional[0])");
  CHECK_ERROR(fsdpa_attention_data(&a.tensors, NULL, b.k, b.v, b.out, optional, &o, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT, "q: data is null");
  CHECK_ERROR(fsdpa_attention_data(NULL, b.q, b.k, b.v, b.out, optional, &o, NULL),
              FSDPA_ERROR_INVALID_ARGUMENT, "tensors: null pointer");
  problem_free(&a);
  problem_free(&b);
  /* No optional views: optional may be NULL. */
  problem_init(&a, 1, 4, 4, 3, 6, 8, 8, MASK_NONE, false, false, true);
  problem_init(&b, 1, 4, 4, 3, 6, 8, 8, MASK_NONE, false, false, true);
  o = fsdpa_options_init();
  CHECK(fsdpa_attention_data(&a.tensors, b.q, b.k, b.v, b.out, NULL, &o, NULL) == FSDPA_OK);
  check_against_naive(&b.tensors, &o, kF32Tolerance, __LINE__);
  CHECK(isnan(a.out[0]));
  problem_free(&a);
  problem_free(&b);
}

static void test_paged_cache(void) {
  enum { B = 2, HQ = 4, HKV = 2, LQ = 3, LK = 12, D = 8, PAGE = 4, PAGES = B * LK / PAGE };
  static const int32_t policies[] = {FSDPA_POLICY_FUSED, FSDPA_POLICY_UNFUSED};
  float* q = random_floats((size_t)(B * HQ * LQ * D));
  float* k = random_floats((size_t)(B * HKV * LK * D));
  float* v = random_floats((size_t)(B * HKV * LK * D));
  float* k_pool = poisoned_floats((size_t)(PAGES * PAGE * HKV * D));
  float* v_pool = poisoned_floats((size_t)(PAGES * PAGE * HKV * D));
  float* out_dense = poisoned_floats((size_t)(B * HQ * LQ * D));
  float* out_paged = poisoned_floats((size_t)(B * HQ * LQ * D));
  int32_t table[B][LK / PAGE], lens[B] = {LK, 5};
  for (int b = 0; b < B; ++b)
    for (int page = 0; page < LK / PAGE; ++page) {
      const int slot = PAGES - 1 - (b * (LK / PAGE) + page); /* reversed */
      table[b][page] = slot;
      for (int r = 0; r < PAGE; ++r)
        for (int h = 0; h < HKV; ++h)
          for (int d = 0; d < D; ++d) {
            const int64_t dense = ((int64_t)(b * HKV + h) * LK + page * PAGE + r) * D + d;
            const int64_t pooled = (((int64_t)slot * PAGE + r) * HKV + h) * D + d;
            k_pool[pooled] = k[dense];
            v_pool[pooled] = v[dense];
          }
    }
  const int64_t table_sizes[2] = {B, LK / PAGE}, lens_size = B;
  fsdpa_tensor table_view = contiguous(table, FSDPA_DTYPE_I32, 2, table_sizes);
  fsdpa_tensor lens_view = contiguous(lens, FSDPA_DTYPE_I32, 1, &lens_size);
  fsdpa_tensors dense = {0}, paged = {0};
  dense.q = paged.q = contiguous4(q, FSDPA_DTYPE_F32, B, HQ, LQ, D);
  dense.k = contiguous4(k, FSDPA_DTYPE_F32, B, HKV, LK, D);
  dense.v = contiguous4(v, FSDPA_DTYPE_F32, B, HKV, LK, D);
  dense.out = contiguous4(out_dense, FSDPA_DTYPE_F32, B, HQ, LQ, D);
  paged.k = contiguous4(k_pool, FSDPA_DTYPE_F32, PAGES, PAGE, HKV, D);
  paged.v = contiguous4(v_pool, FSDPA_DTYPE_F32, PAGES, PAGE, HKV, D);
  paged.out = contiguous4(out_paged, FSDPA_DTYPE_F32, B, HQ, LQ, D);
  dense.seq_lens_k = paged.seq_lens_k = &lens_view;
  paged.block_table = &table_view;
  for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; ++pi) {
    fsdpa_options o = fsdpa_options_init();
    o.causal = 1;
    o.policy = policies[pi];
    CHECK(fsdpa_attention(&dense, &o, NULL) == FSDPA_OK);
    CHECK(fsdpa_attention(&paged, &o, NULL) == FSDPA_OK);
    CHECK(memcmp(out_dense, out_paged, sizeof(float) * B * HQ * LQ * D) == 0);
    CHECK(!isnan(out_paged[0]) && !isnan(out_paged[B * HQ * LQ * D - 1]));
    /* The paged layout on the same data through fsdpa_attention_data. */
    const void* optional[5] = {NULL, NULL, NULL, table, lens};
    for (int64_t i = 0; i < B * HQ * LQ * D; ++i) out_dense[i] = NAN;
    CHECK(fsdpa_attention_data(&paged, q, k_pool, v_pool, out_dense, optional, &o, NULL) ==
          FSDPA_OK);
    CHECK(memcmp(out_dense, out_paged, sizeof(float) * B * HQ * LQ * D) == 0);
  }
  fsdpa_plan* plan = NULL;
  fsdpa_plan_info info;
  CHECK(fsdpa_plan_create(&paged, NULL, &plan) == FSDPA_OK);
  CHECK(fsdpa_plan_get_info(plan, &info) == FSDPA_OK);
  CHECK(info.page_size == PAGE && info.num_pages == PAGES && info.has_seq_lens_k == 1);
  CHECK(info.len_k == LK && info.num_v_slices == 1);
  fsdpa_plan_destroy(plan);
  table[1][1] = PAGES; /* sequence 1's second page: outside the pool */
  CHECK_ERROR(fsdpa_attention(&paged, NULL, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "block_table: element [1, 1] is 6, outside the pool's 6 pages");
  free(q), free(k), free(v), free(k_pool), free(v_pool), free(out_dense), free(out_paged);
}

static void test_thread_local_last_error(void) {
  CHECK_ERROR(fsdpa_attention(NULL, NULL, NULL), FSDPA_ERROR_INVALID_ARGUMENT,
              "fsdpa: tensors: null pointer");
  thread_result result;
  memset(&result, 0, sizeof result);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, second_thread, &result) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(result.empty_at_start);
  CHECK(result.status == FSDPA_ERROR_INVALID_ARGUMENT);
  CHECK(strcmp(result.message, "fsdpa: policy: unknown value 99") == 0);
  /* This thread's message is its own. */
  CHECK(strcmp(fsdpa_last_error(), "fsdpa: tensors: null pointer") == 0);
}

/* ------------------------------------------------------------ the rest */

static void test_version_and_matrix(void) {
  CHECK(strcmp(fsdpa_version(), FSDPA_EXPECTED_VERSION) == 0);
  CHECK(fsdpa_abi_version() == FSDPA_ABI_VERSION);
  CHECK(fsdpa_backend_built(FSDPA_BACKEND_CPU) == 1);
  CHECK(fsdpa_backend_built(FSDPA_BACKEND_CUDA) == 0 ||
        fsdpa_backend_built(FSDPA_BACKEND_CUDA) == 1);
  CHECK(fsdpa_backend_built(77) == 0);
  const char* matrix = fsdpa_support_matrix();
  CHECK(matrix != NULL && strlen(matrix) > 100);
  CHECK(strstr(matrix, "| cpu |") != NULL);
  CHECK(strstr(matrix, "Backend cpu, bf16, policy auto") != NULL);
  CHECK(fsdpa_support_matrix() == matrix); /* static storage */
}

int main(void) {
  g_random_state = (uint64_t)time(NULL) * 2654435761ULL ^ (uint64_t)clock();
  printf("test_c_api: fsdpa %s, random seed %llu\n", fsdpa_version(),
         (unsigned long long)g_random_state);
  test_options_init();
  test_attention_matches_naive();
  test_plan_and_run();
  test_errors();
  test_attention_on_other_data();
  test_paged_cache();
  test_thread_local_last_error();
  test_version_and_matrix();
  printf("test_c_api: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
