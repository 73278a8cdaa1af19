/* The sampler's shared-prompt attention for one new token per row on AVX-512 CPUs, float32: each row's
   query heads attend its prompt's keys and values (stored once per prompt, left padding hidden) and the
   row's own completion keys and values, in one softmax.

   Why: the same attention written as torch ops (polyrl_torch.shared_prompt_cache) is four small batched
   matmuls and a dozen elementwise ops a layer, each a dispatch costing more than its arithmetic at
   these sizes (a few rows, a head dimension of 64, tens to hundreds of keys). Here each row and key/value
   head reads its keys once for all the query heads of its group and keeps the sums in registers. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "native_exp.h"

/* The sums of 16 vectors, one a lane (lane i: v[i]'s sum): pairs within 128-bit lanes, then across them. */
static inline __m512 sums16(const __m512 *v) {
    __m512 t[8], u[4];
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44), _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
    const __m512 low = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const __m512 high = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, 0x88), _mm512_shuffle_f32x4(low, high, 0xDD));
}

/* scores[a * stride + j] = scale * q_a . key_j for the `g` queries `q` ([g][d]) and `count` keys ([count][d]),
   16 keys at a time; a key whose `hidden` byte is set (NULL: none is) scores -inf. */
static void score(const float *q, int g, int d, const float *keys, int count, const unsigned char *hidden,
                  float scale, float *scores, int stride) {
    const __m512 scales = _mm512_set1_ps(scale), none = _mm512_set1_ps(-INFINITY);
    for (int j0 = 0; j0 < count; j0 += 16) {
        const int n = count - j0 < 16 ? count - j0 : 16;
        __mmask16 shown = n == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
        const __mmask16 block = shown;
        if (hidden)
            for (int jj = 0; jj < n; jj++)
                if (hidden[j0 + jj]) shown &= (__mmask16)~(1u << jj);
        for (int a = 0; a < g; a++) {
            const float *qa = q + (size_t)a * d;
            __m512 products[16];
            for (int jj = 0; jj < 16; jj++) {
                __m512 acc = _mm512_setzero_ps();
                if (jj < n) {
                    const float *key = keys + (size_t)(j0 + jj) * d;
                    for (int c = 0; c < d; c += 16)
                        acc = _mm512_fmadd_ps(_mm512_loadu_ps(qa + c), _mm512_loadu_ps(key + c), acc);
                }
                products[jj] = acc;
            }
            const __m512 s = _mm512_mask_blend_ps(shown, none, _mm512_mul_ps(sums16(products), scales));
            _mm512_mask_storeu_ps(scores + (size_t)a * stride + j0, block, s);
        }
    }
}

/* out += sum_j w[j] * values[j] over `count` values ([count][d]), d / 16 <= 16 vectors of sums. */
static void gather(const float *w, const float *values, int count, int d, __m512 *acc) {
    for (int j = 0; j < count; j++) {
        const __m512 weight = _mm512_set1_ps(w[j]);
        const float *value = values + (size_t)j * d;
        for (int c = 0; c < d / 16; c++) acc[c] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(value + 16 * c), acc[c]);
    }
}

/* q [rows][kv_heads][g][d]; prompt_keys/values [prompts][kv_heads][prompt_len][d]; hidden [prompts][prompt_len]
   (1: a padding position); owner [rows] (each row's prompt); keys/values [rows][kv_heads][capacity][d], the
   first `length` positions written; scratch: g * (prompt_len + length) floats; out like q. d: a multiple of
   16, at most 256 (the caller checks). */
void polyrl_shared_attention(const float *q, const float *prompt_keys, const float *prompt_values,
                             const unsigned char *hidden, const int64_t *owner, const float *keys,
                             const float *values, int rows, int kv_heads, int g, int d, int prompt_len,
                             int capacity, int length, float scale, float *scratch, float *out) {
    const int total = prompt_len + length;
    for (int r = 0; r < rows; r++) {
        const int64_t p = owner[r];
        for (int h = 0; h < kv_heads; h++) {
            const size_t shared = ((size_t)p * kv_heads + h) * prompt_len * d;
            const size_t own = ((size_t)r * kv_heads + h) * capacity * d;
            const float *qs = q + ((size_t)r * kv_heads + h) * g * d;
            score(qs, g, d, prompt_keys + shared, prompt_len, hidden + (size_t)p * prompt_len, scale, scratch, total);
            score(qs, g, d, keys + own, length, NULL, scale, scratch + prompt_len, total);
            for (int a = 0; a < g; a++) {
                float *s = scratch + (size_t)a * total;
                __m512 top = _mm512_set1_ps(-INFINITY);
                int j = 0;
                for (; j + 16 <= total; j += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(s + j));
                float peak = _mm512_reduce_max_ps(top);
                for (; j < total; j++) peak = s[j] > peak ? s[j] : peak;
                const __m512 peaks = _mm512_set1_ps(peak), none = _mm512_set1_ps(-INFINITY);
                __m512 sums = _mm512_setzero_ps();
                for (j = 0; j < total; j += 16) {
                    const __mmask16 in = total - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (total - j)) - 1u);
                    const __m512 v = _mm512_maskz_loadu_ps(in, s + j);
                    const __mmask16 seen = _mm512_mask_cmp_ps_mask(in, v, none, _CMP_NEQ_OQ);
                    const __m512 w = _mm512_maskz_mov_ps(seen, exp_ps(_mm512_sub_ps(v, peaks)));
                    _mm512_mask_storeu_ps(s + j, in, w);
                    sums = _mm512_add_ps(sums, w);
                }
                __m512 acc[16];
                for (int c = 0; c < d / 16; c++) acc[c] = _mm512_setzero_ps();
                gather(s, prompt_values + shared, prompt_len, d, acc);
                gather(s + prompt_len, values + own, length, d, acc);
                const __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(sums));
                float *o = out + (((size_t)r * kv_heads + h) * g + a) * d;
                for (int c = 0; c < d / 16; c++) _mm512_storeu_ps(o + 16 * c, _mm512_div_ps(acc[c], sum));
            }
        }
    }
}
