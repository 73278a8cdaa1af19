/* The sampler's float32 matmul for AVX-512 CPUs: y[rows][n] = x[rows][k] * w[n][k]^T (+ nothing: bias is
   added by the caller), w packed by decode_kernel.py in panels of 48 output columns, [ceil(n/48)][k][48],
   the last panel padded with zeros.

   Why: a decode step multiplies a few rows by every weight once, so its time is the weights' streaming
   from memory plus the arithmetic. oneDNN's packed matmul does the two in turns on the Xeons here; this
   kernel keeps up to 8 rows x 48 columns of sums in registers and, while it multiplies one panel,
   prefetches the next one into L2, so the next weights arrive during the arithmetic. The rows are split
   into tiles of at most 8, as even as they go (12 rows: two of 6, not 8 and 4), and a tile of R rows is
   compiled for that R: few rows (long completions, small groups) then read each panel once, at about
   the rate this core streams memory. */
#include <immintrin.h>
#include <stddef.h>

#define PANEL 48
#define LINES_PER_K (PANEL * sizeof(float) / 64) /* cache lines of one k step of a panel */

/* One tile: R rows of x times one panel, into R rows x `cols` columns of y. Each k step also prefetches
   `step` lines of the next panel (`*line` counts them across the panel's tiles). */
static inline __attribute__((always_inline)) void tile(const int R, const float *x, int k, const float *w,
                                                       float *y, int n, int cols, const char *next,
                                                       size_t *line, size_t lines, int step) {
    __m512 acc[8][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) acc[r][j] = _mm512_setzero_ps();
    for (int i = 0; i < k; i++) {
        for (int s = 0; s < step && *line < lines; s++, (*line)++) _mm_prefetch(next + *line * 64, _MM_HINT_T1);
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

#define TILE(R) case R: tile(R, xr, k, w, yr, n, cols, next, &line, line_count, step); break;

void polyrl_decode_linear(const float *x, const float *panels, float *y, int rows, int n, int k) {
    if (rows <= 0 || n <= 0) return;
    if (k <= 0) { /* an empty sum */
        for (size_t i = 0; i < (size_t)rows * n; i++) y[i] = 0.0f;
        return;
    }
    const int count = (n + PANEL - 1) / PANEL;
    const int tiles = (rows + 7) / 8;
    const size_t lines = (size_t)k * LINES_PER_K; /* cache lines of one panel */
    /* lines prefetched per k step of each tile: the next panel is in L2 before this one's last tile ends */
    const int step = (int)((lines + (size_t)k * tiles - 1) / ((size_t)k * tiles));
    for (int p = 0; p < count; p++) {
        const float *w = panels + (size_t)p * k * PANEL;
        const char *next = (const char *)(w + (size_t)k * PANEL);
        const size_t line_count = p + 1 < count ? lines : 0; /* nothing after the last panel */
        const int cols = n - p * PANEL < PANEL ? n - p * PANEL : PANEL;
        size_t line = 0;
        for (int t = 0, r = 0; t < tiles; t++) {
            const int height = rows / tiles + (t < rows % tiles);
            const float *xr = x + (size_t)r * k;
            float *yr = y + (size_t)r * n + (size_t)p * PANEL;
            switch (height) {
                TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)
            }
            r += height;
        }
    }
}
