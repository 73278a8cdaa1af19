/* The float32 vectors the sampler's C files are written in, for the two instruction sets they are built for:
   16 lanes with AVX-512F (__AVX512F__: built with -mavx512f) or 8 with AVX2 and FMA (-mavx2 -mfma).

   Why: one source per kernel, whatever the CPU: AVX2-only CPUs (older Xeons, AMD before Zen 4) get the same
   matmul, attention and elementwise code as AVX-512 ones, with half-width vectors. Masks are a lane's "on"
   in either form (a bit on AVX-512, an all-ones lane on AVX2); masked loads read no memory past the mask. */
#ifndef POLYRL_NATIVE_SIMD_H
#define POLYRL_NATIVE_SIMD_H
#include <immintrin.h>

#ifdef __AVX512F__

#define LANES 16
typedef __m512 vf;
typedef __mmask16 vmask;

static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset(float a) { return _mm512_set1_ps(a); }
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
/* a * b + c and c - a * b, one rounding each */
static inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vtop(vf v) { return _mm512_reduce_max_ps(v); }
/* the first n lanes on (n at or past LANES: all) */
static inline vmask vfirst(int n) { return n >= 16 ? (vmask)0xFFFF : n <= 0 ? (vmask)0 : (vmask)((1u << n) - 1u); }
static inline vmask vwithout(vmask m, int lane) { return (vmask)(m & ~(1u << lane)); }
/* lanes off read as 0 (and are not read) / are not written */
static inline vf vload_on(vmask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
static inline void vstore_on(float *p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
/* `on` where m is on, `off` elsewhere; v where m is on, 0 elsewhere */
static inline vf vpick(vmask m, vf off, vf on) { return _mm512_mask_blend_ps(m, off, on); }
static inline vf vkeep(vmask m, vf v) { return _mm512_maskz_mov_ps(m, v); }
/* the lanes of m where a != b (neither a NaN) */
static inline vmask vdiffer(vmask m, vf a, vf b) { return _mm512_mask_cmp_ps_mask(m, a, b, _CMP_NEQ_OQ); }
static inline vf vround(vf v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p * 2^n for integral n in [-126, 127] */
static inline vf vscale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }

/* The sums of 16 vectors, one a lane (lane i: v[i]'s sum): pairs within 128-bit lanes, then across them. */
static inline vf vsums(const vf *v) {
    __m512 t[8], u[4];
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
    const __m512 low = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const __m512 high = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, 0x88), _mm512_shuffle_f32x4(low, high, 0xDD));
}

#elif defined(__AVX2__) && defined(__FMA__)

#define LANES 8
typedef __m256 vf;
typedef __m256i vmask;

static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset(float a) { return _mm256_set1_ps(a); }
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline float vsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vtop(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vmask vlane_numbers(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
static inline vmask vfirst(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), vlane_numbers()); }
static inline vmask vwithout(vmask m, int lane) {
    return _mm256_andnot_si256(_mm256_cmpeq_epi32(vlane_numbers(), _mm256_set1_epi32(lane)), m);
}
static inline vf vload_on(vmask m, const float *p) { return _mm256_maskload_ps(p, m); }
static inline void vstore_on(float *p, vmask m, vf v) { _mm256_maskstore_ps(p, m, v); }
static inline vf vpick(vmask m, vf off, vf on) { return _mm256_blendv_ps(off, on, _mm256_castsi256_ps(m)); }
static inline vf vkeep(vmask m, vf v) { return _mm256_and_ps(_mm256_castsi256_ps(m), v); }
static inline vmask vdiffer(vmask m, vf a, vf b) {
    return _mm256_and_si256(m, _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_NEQ_OQ)));
}
static inline vf vround(vf v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n built in the exponent field: exact for n in [-126, 127], as vscalefps is */
static inline vf vscale2(vf p, vf n) {
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* The sums of 8 vectors, one a lane (lane i: v[i]'s sum): pairs and quads within 128-bit lanes, then the halves. */
static inline vf vsums(const vf *v) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

#else
#error "the sampler's C files are built with -mavx512f, or -mavx2 -mfma"
#endif

/* The first `left` floats at p, at most a vector of them: a whole vector by plain loads and stores (AVX2's
   masked ones cost several times a plain one on some cores), a part through a mask (lanes past `left` read
   as 0 and are not written). */
static inline vf vload_upto(const float *p, int left) { return left >= LANES ? vload(p) : vload_on(vfirst(left), p); }
static inline void vstore_upto(float *p, int left, vf v) {
    if (left >= LANES)
        vstore(p, v);
    else
        vstore_on(p, vfirst(left), v);
}

#endif
