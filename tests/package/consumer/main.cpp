// Uses only the installed public header: one tiny attention call.
#include <fsdpa/fsdpa.h>

#include <cmath>
#include <cstdio>

int main() {
  // One query, two keys with equal scores: the output is the mean of the values.
  float q[2] = {1.0f, 0.0f}, k[4] = {0.5f, 1.0f, 0.5f, -1.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float out[2] = {NAN, NAN};
  fsdpa::Tensors t;
  t.q = fsdpa::contiguous_view(q, fsdpa::DType::F32, {1, 1, 1, 2});
  t.k = fsdpa::contiguous_view(k, fsdpa::DType::F32, {1, 1, 2, 2});
  t.v = fsdpa::contiguous_view(v, fsdpa::DType::F32, {1, 1, 2, 2});
  t.out = fsdpa::contiguous_view(out, fsdpa::DType::F32, {1, 1, 1, 2});
  fsdpa::attention(t);
  bool ok = std::fabs(out[0] - 2.0f) < 1e-6f && std::fabs(out[1] - 3.0f) < 1e-6f;
  std::printf("fsdpa %s: out = [%g, %g] %s\n", fsdpa::version(), out[0], out[1],
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
