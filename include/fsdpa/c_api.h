/* fsdpa C ABI: the C++ API of fsdpa/fsdpa.h behind plain structs and status
 * codes, for C, Python ctypes, Rust and other FFI users.
 *
 *   fsdpa_tensors t = {0};
 *   t.q = (fsdpa_tensor){q_data, FSDPA_DTYPE_F16, FSDPA_DEVICE_CPU, 0, 4,
 *                        {B, Hq, Lq, Dqk}, {Hq*Lq*Dqk, Lq*Dqk, Dqk, 1}};
 *   ... k, v, out likewise; t.lse = &lse_view (optional) ...
 *   fsdpa_options o = fsdpa_options_init();
 *   o.causal = 1;
 *   if (fsdpa_attention(&t, &o, NULL) != FSDPA_OK)
 *     fprintf(stderr, "%s\n", fsdpa_last_error());
 *
 * Rules:
 * - Every function returning fsdpa_status catches every exception: none
 *   crosses the ABI. On failure it returns a nonzero status and records a
 *   message starting with "fsdpa: " that fsdpa_last_error() returns.
 * - The last error is thread-local and is kept until the next failure in the
 *   same thread (a success does not clear it).
 * - Integer enum fields take the values of the C++ enums. Unknown values are
 *   rejected with FSDPA_ERROR_INVALID_ARGUMENT ("... unknown ... value N").
 * - Strides are in elements, not bytes. Negative strides are rejected.
 * - Boolean fields (has_scale, causal, ...) are int32_t: 0 = false.
 * - The structs contain only fixed-width fields with no implicit padding, so
 *   their layout is the same for every C compiler, ctypes and Rust #[repr(C)].
 */
#ifndef FSDPA_C_API_H_
#define FSDPA_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FSDPA_C_EXPORT __declspec(dllexport)
#else
#define FSDPA_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct layout or a function signature changes, or a
 * function is added. */
#define FSDPA_ABI_VERSION 4

/* ------------------------------------------------------------ status */

typedef int32_t fsdpa_status;
enum {
  FSDPA_OK = 0,
  FSDPA_ERROR_INVALID_ARGUMENT = 1, /* fsdpa::InvalidArgument, null required pointers */
  FSDPA_ERROR_UNSUPPORTED = 2,      /* fsdpa::Unsupported: no kernel can serve the call */
  FSDPA_ERROR_DEVICE = 3,           /* fsdpa::DeviceError: a CUDA call failed */
  FSDPA_ERROR_INTERNAL = 4          /* anything else, std::bad_alloc included */
};

/* ------------------------------------------------------------ enums */

enum {
  FSDPA_DTYPE_F16 = 0,
  FSDPA_DTYPE_BF16 = 1,
  FSDPA_DTYPE_F32 = 2,
  FSDPA_DTYPE_BOOL = 3,
  FSDPA_DTYPE_I32 = 4 /* block_table and seq_lens_k only */
};
enum { FSDPA_DEVICE_CPU = 0, FSDPA_DEVICE_CUDA = 1 };
enum { FSDPA_CAUSAL_ALIGN_BOTTOM_RIGHT = 0, FSDPA_CAUSAL_ALIGN_TOP_LEFT = 1 };
enum {
  FSDPA_POLICY_DEFAULT = -1, /* the environment variable FSDPA_POLICY, else auto */
  FSDPA_POLICY_AUTO = 0,
  FSDPA_POLICY_FUSED = 1, /* fsdpa::Policy::ForceFused */
  FSDPA_POLICY_UNFUSED = 2
};
enum { FSDPA_BACKEND_CPU = 0, FSDPA_BACKEND_CUDA = 1 };
enum { FSDPA_PATH_FUSED_PREFILL = 0, FSDPA_PATH_FUSED_DECODE = 1, FSDPA_PATH_UNFUSED = 2 };
enum { FSDPA_MASK_NONE = 0, FSDPA_MASK_ADDITIVE = 1, FSDPA_MASK_BOOLEAN = 2 };

/* ------------------------------------------------------------ structs */

#define FSDPA_MAX_RANK 4

/* A strided view of caller-owned memory (fsdpa::TensorView). 88 bytes. */
typedef struct fsdpa_tensor {
  void* data;
  int32_t dtype;        /* FSDPA_DTYPE_* */
  int32_t device_type;  /* FSDPA_DEVICE_* */
  int32_t device_index; /* CUDA ordinal; 0 for the CPU */
  int32_t rank; /* 4 for q/k/v/out/mask, 3 for lse, 2 for block_table, 1 for sinks, seq_lens_k */
  int64_t sizes[FSDPA_MAX_RANK];
  int64_t strides[FSDPA_MAX_RANK]; /* in elements */
} fsdpa_tensor;

/* fsdpa::Options. Start from fsdpa_options_init() or FSDPA_OPTIONS_INIT: an
 * all-zero struct means policy auto (ignoring FSDPA_POLICY). 48 bytes. */
typedef struct fsdpa_options {
  int32_t has_scale; /* else scale = 1/sqrt(Dqk) */
  int32_t causal;
  double scale;         /* finite and > 0 when has_scale */
  int32_t causal_align; /* FSDPA_CAUSAL_ALIGN_* */
  int32_t has_window;
  int64_t window_left; /* >= 0 when has_window */
  int32_t policy;      /* FSDPA_POLICY_* */
  int32_t allow_tf32;
  double softcap; /* > 0: s = softcap * tanh(s / softcap) before masks; 0: none */
} fsdpa_options;

#define FSDPA_OPTIONS_INIT \
  { 0, 0, 0.0, FSDPA_CAUSAL_ALIGN_BOTTOM_RIGHT, 0, 0, FSDPA_POLICY_DEFAULT, 0, 0.0 }

/* The tensors of one call (fsdpa::Tensors). out and *lse are written. The
 * optional ones are absent when their pointer is NULL. With block_table, k
 * and v are page pools [num_pages, page_size, Hkv, D] and key j of sequence
 * b is row j % page_size of page block_table[b, j / page_size]. 392 bytes. */
typedef struct fsdpa_tensors {
  fsdpa_tensor q;                  /* [B, Hq, Lq, Dqk] */
  fsdpa_tensor k;                  /* [B, Hkv, Lk, Dqk], paged [num_pages, page_size, Hkv, Dqk] */
  fsdpa_tensor v;                  /* [B, Hkv, Lk, Dv], paged [num_pages, page_size, Hkv, Dv] */
  fsdpa_tensor out;                /* [B, Hq, Lq, Dv], same dtype as q */
  const fsdpa_tensor* mask;        /* [B|1, Hq|1, Lq, Lk]; bool = keep, else additive */
  const fsdpa_tensor* sinks;       /* [Hq] f32 */
  const fsdpa_tensor* lse;         /* [B, Hq, Lq] f32, written */
  const fsdpa_tensor* block_table; /* [B, max_pages] i32: a paged KV cache */
  const fsdpa_tensor* seq_lens_k;  /* [B] i32: keys per sequence, each in [0, Lk] */
} fsdpa_tensors;

#define FSDPA_KERNEL_NAME_CAPACITY 128
#define FSDPA_FALLBACK_REASON_CAPACITY 1024

/* The facts of a plan (fsdpa::Plan). Strings are NUL-terminated; a string
 * longer than its array is cut and ends in "..." (fsdpa_plan_explain() has
 * the full text). 1336 bytes. */
typedef struct fsdpa_plan_info {
  int32_t backend;     /* FSDPA_BACKEND_* */
  int32_t path;        /* FSDPA_PATH_* */
  int32_t policy;      /* resolved: FSDPA_POLICY_AUTO, _FUSED or _UNFUSED */
  int32_t dtype;       /* of q/k/v/out */
  int32_t device_type; /* FSDPA_DEVICE_* */
  int32_t device_index;
  int32_t mask; /* FSDPA_MASK_* */
  int32_t has_sinks;
  int32_t has_lse;
  int32_t num_threads; /* CPU backend worker threads */
  int64_t batch;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t len_q;
  int64_t len_k;
  int64_t head_dim_qk;
  int64_t head_dim_v;
  int64_t head_dim_qk_bucket; /* compiled head-dim bucket, 0 where none */
  int64_t head_dim_v_bucket;
  int64_t tile_q;
  int64_t tile_k;
  int64_t num_kv_splits;
  int64_t page_size; /* paged KV cache: keys per page; 0 when k and v are dense */
  int64_t num_pages; /* pages in the pool (0 when dense) */
  int32_t has_seq_lens_k;
  int32_t num_v_slices;     /* Dv in this many column slices (fused prefill above Dv=256) */
  uint64_t workspace_bytes; /* what fsdpa_run needs */
  double scale;             /* resolved */
  double pad_ratio;         /* work done / work needed (Plan::pad_ratio: slices that share */
                            /* q.k count bucket_qk once) */
  char kernel[FSDPA_KERNEL_NAME_CAPACITY];
  char fallback_reason[FSDPA_FALLBACK_REASON_CAPACITY]; /* "" when none */
} fsdpa_plan_info;

/* An fsdpa::Plan. Immutable once created; may be run from several threads. */
typedef struct fsdpa_plan fsdpa_plan;

/* ------------------------------------------------------------ functions */

/* The defaults: no scale (1/sqrt(Dqk)), not causal, bottom-right alignment,
 * no window, policy FSDPA_POLICY_DEFAULT, no TF32. */
FSDPA_C_EXPORT fsdpa_options fsdpa_options_init(void);

/* describe + plan + workspace + run (fsdpa::attention). options may be NULL
 * (the defaults). stream: a cudaStream_t for CUDA tensors (NULL = default
 * stream), NULL for CPU tensors. The GPU call does not synchronize. */
FSDPA_C_EXPORT fsdpa_status fsdpa_attention(const fsdpa_tensors* tensors,
                                            const fsdpa_options* options, void* stream);

/* fsdpa_attention() on the views of `layout` with other data: q, k, v and
 * out replace the data pointers of layout's q, k, v and out, and `optional`
 * holds the data of mask, sinks, lse, block_table and seq_lens_k, in that
 * order, each read only where layout has that view (optional may be NULL
 * when layout has none of them). layout is not written. For bindings that
 * call one layout on new tensors again and again: no fsdpa_tensors to copy
 * and patch per call. */
FSDPA_C_EXPORT fsdpa_status fsdpa_attention_data(const fsdpa_tensors* layout, const void* q,
                                                 const void* k, const void* v, void* out,
                                                 const void* const* optional,
                                                 const fsdpa_options* options, void* stream);

/* Validates the tensors and plans for them (fsdpa::describe + fsdpa::plan).
 * On success *plan holds a new plan to release with fsdpa_plan_destroy; on
 * failure *plan is set to NULL. options may be NULL. */
FSDPA_C_EXPORT fsdpa_status fsdpa_plan_create(const fsdpa_tensors* tensors,
                                              const fsdpa_options* options, fsdpa_plan** plan);

FSDPA_C_EXPORT fsdpa_status fsdpa_plan_get_info(const fsdpa_plan* plan, fsdpa_plan_info* info);

/* Multi-line description; valid until fsdpa_plan_destroy(plan). NULL (with
 * the last error set) when plan is NULL. */
FSDPA_C_EXPORT const char* fsdpa_plan_explain(const fsdpa_plan* plan);

/* Launches the plan on tensors of the planned shape (fsdpa::run): no
 * allocation, no host synchronization. workspace must hold
 * info.workspace_bytes (NULL when that is 0), 16-byte aligned for a CUDA
 * plan. */
FSDPA_C_EXPORT fsdpa_status fsdpa_run(const fsdpa_plan* plan, const fsdpa_tensors* tensors,
                                      void* workspace, size_t workspace_bytes, void* stream);

/* Releases a plan; NULL is ignored. */
FSDPA_C_EXPORT void fsdpa_plan_destroy(fsdpa_plan* plan);

/* The support matrix from the selection table (static storage). "" (with the
 * last error set) if it could not be made. */
FSDPA_C_EXPORT const char* fsdpa_support_matrix(void);

/* The names of the environment variables planning reads, comma-separated
 * (static storage): a caller that caches plans keys on their values. */
FSDPA_C_EXPORT const char* fsdpa_plan_environment(void);

/* 1 when the backend (FSDPA_BACKEND_*) is compiled into this library. */
FSDPA_C_EXPORT int32_t fsdpa_backend_built(int32_t backend);

/* The library version, e.g. "0.1.0" (static storage). */
FSDPA_C_EXPORT const char* fsdpa_version(void);

/* FSDPA_ABI_VERSION of the library, to check against the header used. */
FSDPA_C_EXPORT int32_t fsdpa_abi_version(void);

/* The message of the last failure in the calling thread, "" if none. Valid
 * until the next failing fsdpa call in this thread. */
FSDPA_C_EXPORT const char* fsdpa_last_error(void);

/* "ok", "invalid argument", "unsupported", "device error", "internal error",
 * or "unknown status". */
FSDPA_C_EXPORT const char* fsdpa_status_string(fsdpa_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FSDPA_C_API_H_ */
