/* The elementwise work of a Llama decode step for a few rows, float32, on AVX-512 or AVX2 CPUs: RMSNorm (with the
   residual add before it), the rotary embedding of queries and keys, and the SiLU-gated product.

   Why: between a decode step's matmuls these are a few dozen torch ops a layer on tensors of a few
   thousand floats, each costing its dispatch more than its arithmetic. The rotary embedding computes
   what transformers' apply_rotary_pos_emb computes, bit for bit (the same products and sums, no fused
   multiply-add: built with -ffp-contract=off); the norm sums its squares in another order and the SiLU
   uses native_exp.h's e^x, so those agree with torch's to float32 rounding. */
#include <math.h>
#include <stddef.h>

#include "native_exp.h"
#include "native_simd.h"

/* y = weight * (x * (1 / sqrt(mean(x^2) + eps))) for each of `rows` rows of width d; where `delta` is not
   NULL, x += delta first (in place: the residual stream). */
void polyrl_add_rms_norm(float *x, const float *delta, const float *weight, float *y, int rows, int d, float eps) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        vf squares = vzero();
        for (int c = 0; c < d; c += LANES) {
            vf v = vload_upto(xr + c, d - c);
            if (delta) {
                v = vadd(v, vload_upto(delta + (size_t)r * d + c, d - c));
                vstore_upto(xr + c, d - c, v);
            }
            squares = vfmadd(v, v, squares);
        }
        const vf s = vset(1.0f / sqrtf(vsum(squares) / (float)d + eps));
        for (int c = 0; c < d; c += LANES) {
            const vf v = vmul(vload_upto(xr + c, d - c), s);
            vstore_upto(yr + c, d - c, vmul(vload_upto(weight + c, d - c), v));
        }
    }
}

/* In place, each head of width d (even) of `rows` rows, `heads` heads a row: x * cos + rotate_half(x) * sin,
   rotate_half(x) = (-x[d/2:], x[:d/2]); cos and sin are [rows][d]. */
void polyrl_rotary(float *x, const float *cos, const float *sin, int rows, int heads, int d) {
    const int half = d / 2;
    for (int r = 0; r < rows; r++) {
        const float *cr = cos + (size_t)r * d, *sr = sin + (size_t)r * d;
        for (int h = 0; h < heads; h++) {
            float *v = x + ((size_t)r * heads + h) * d;
            for (int i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half];
                v[i] = a * cr[i] + (-b) * sr[i];
                v[i + half] = b * cr[i + half] + a * sr[i + half];
            }
        }
    }
}

/* y = gate / (1 + e^-gate) * up over `count` floats (LlamaMLP's act_fn(gate_proj(x)) * up_proj(x), SiLU). */
void polyrl_silu_mul(const float *gate, const float *up, float *y, long count) {
    const vf one = vset(1.0f);
    for (long i = 0; i < count; i += LANES) {
        const int left = count - i > LANES ? LANES : (int)(count - i);
        const vf g = vload_upto(gate + i, left);
        const vf e = exp_ps(vsub(vzero(), g));
        vstore_upto(y + i, left, vmul(vdiv(g, vadd(one, e)), vload_upto(up + i, left)));
    }
}
