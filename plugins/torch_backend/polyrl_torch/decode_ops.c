/* The elementwise work of a Llama decode step for a few rows, float32, on AVX-512 CPUs: RMSNorm (with the
   residual add before it), the rotary embedding of queries and keys, and the SiLU-gated product.

   Why: between a decode step's matmuls these are a few dozen torch ops a layer on tensors of a few
   thousand floats, each costing its dispatch more than its arithmetic. The rotary embedding computes
   what transformers' apply_rotary_pos_emb computes, bit for bit (the same products and sums, no fused
   multiply-add: built with -ffp-contract=off); the norm sums its squares in another order and the SiLU
   uses native_exp.h's e^x, so those agree with torch's to float32 rounding. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include "native_exp.h"

static inline __mmask16 tail(int left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u); }

/* y = weight * (x * (1 / sqrt(mean(x^2) + eps))) for each of `rows` rows of width d; where `delta` is not
   NULL, x += delta first (in place: the residual stream). */
void polyrl_add_rms_norm(float *x, const float *delta, const float *weight, float *y, int rows, int d, float eps) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        __m512 squares = _mm512_setzero_ps();
        for (int c = 0; c < d; c += 16) {
            const __mmask16 m = tail(d - c);
            __m512 v = _mm512_maskz_loadu_ps(m, xr + c);
            if (delta) {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, delta + (size_t)r * d + c));
                _mm512_mask_storeu_ps(xr + c, m, v);
            }
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        const float scale = 1.0f / sqrtf(_mm512_reduce_add_ps(squares) / (float)d + eps);
        const __m512 s = _mm512_set1_ps(scale);
        for (int c = 0; c < d; c += 16) {
            const __mmask16 m = tail(d - c);
            const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + c), s);
            _mm512_mask_storeu_ps(yr + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, weight + c), v));
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
    const __m512 one = _mm512_set1_ps(1.0f);
    for (long i = 0; i < count; i += 16) {
        const __mmask16 m = tail(count - i > 16 ? 16 : (int)(count - i));
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
    }
}
