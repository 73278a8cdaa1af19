/* The sampler's float32 matmul for AVX-512 CPUs: y[rows][n] = x[rows][k] * w[n][k]^T (+ nothing: bias is
   added by the caller), w packed by decode_kernel.py in panels of 48 output columns, [ceil(n/48)][k][48],
   the last panel padded with zeros.

   Why: a decode step multiplies a few tens of rows by every weight once, so its time is the weights'
   streaming from memory plus the arithmetic. oneDNN's packed matmul does the two in turns on the Xeons
   here; this kernel keeps 8 rows x 48 columns of sums in 24 registers and, while it multiplies one
   panel, prefetches the panel two ahead into L2, so the next weights arrive during the arithmetic. */
#include <immintrin.h>
#include <stddef.h>

#define PANEL 48
#define AHEAD 2 /* panels ahead that are prefetched */

static inline __attribute__((always_inline)) void tile(const int R, const float *x, int k, const float *w,
                                                       float *y, int n, int cols, const char *ahead,
                                                       const char *end, size_t *line, size_t lines) {
    __m512 acc[8][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) acc[r][j] = _mm512_setzero_ps();
    for (int i = 0; i < k; i++) {
        if (*line < lines) {
            const char *q = ahead + *line * 64;
            if (q < end) _mm_prefetch(q, _MM_HINT_T1);
            (*line)++;
        }
        const float *wi = w + (size_t)i * PANEL;
        const __m512 b0 = _mm512_loadu_ps(wi), b1 = _mm512_loadu_ps(wi + 16), b2 = _mm512_loadu_ps(wi + 32);
        for (int r = 0; r < R; r++) {
            const __m512 s = _mm512_set1_ps(x[(size_t)r * k + i]);
            acc[r][0] = _mm512_fmadd_ps(s, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(s, b1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(s, b2, acc[r][2]);
        }
    }
    for (int j = 0; j < 3; j++) {
        const int valid = cols - 16 * j;
        if (valid <= 0) break;
        const __mmask16 mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1u);
        for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + (size_t)r * n + 16 * j, mask, acc[r][j]);
    }
}

void polyrl_decode_linear(const float *x, const float *panels, float *y, int rows, int n, int k) {
    const int count = (n + PANEL - 1) / PANEL;
    const size_t lines = (size_t)k * PANEL * sizeof(float) / 64; /* cache lines of one panel */
    const char *end = (const char *)(panels + (size_t)count * k * PANEL);
    for (int p = 0; p < count; p++) {
        const float *w = panels + (size_t)p * k * PANEL;
        const char *ahead = (const char *)(w + (size_t)AHEAD * k * PANEL);
        const int cols = n - p * PANEL < PANEL ? n - p * PANEL : PANEL;
        size_t line = 0; /* the panel AHEAD panels on is prefetched one line per k step, across row groups */
        int r = 0;
        for (; r + 8 <= rows; r += 8)
            tile(8, x + (size_t)r * k, k, w, y + (size_t)r * n + (size_t)p * PANEL, n, cols, ahead, end, &line, lines);
        for (; r < rows; r++)
            tile(1, x + (size_t)r * k, k, w, y + (size_t)r * n + (size_t)p * PANEL, n, cols, ahead, end, &line, lines);
    }
}
