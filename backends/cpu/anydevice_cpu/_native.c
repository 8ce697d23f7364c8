/* Fused float32 kernels of the cpu backend, for what numpy can only do in several passes with a
 * call each: softmax and log_softmax along contiguous last-axis rows and their gradients, and
 * float32 <-> float16 conversion (numpy converts element by element).
 *
 * Every function takes C-contiguous buffers (the Python side checks dtype, layout and sizes) and
 * the row length n. Results do not depend on the vector width the compiler picks: sums run in
 * SUMW fixed partial sums combined in a fixed order. No multiply-add is contracted
 * (-ffp-contract=off), except in softmax_rows (FUSED): there the clones for CPUs with FMA
 * use it (about 12 % faster), so their last bits may differ from the default clone's, as numpy's
 * own SIMD loops differ between CPUs. The reductions, which give numpy's bits, never contract.
 *
 * exp is evaluated here rather than through libm so that the loops vectorize: the argument is
 * split as n*ln2 + r with |r| <= ln2/2 (ln2 in two parts), e^r by a degree-7 polynomial (the
 * Cephes coefficients), and 2^n applied in two steps so that results in the subnormal range are
 * rounded once. Error at most 2 ulp against the exact value (tests compare with float64). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#include <immintrin.h>
#define HAVE_F16C_PATH 1
#else
#define CLONES
#define HAVE_F16C_PATH 0
#endif

#define SUMW 16
#if defined(__GNUC__) && !defined(__clang__)
#define FUSED __attribute__((optimize("fp-contract=fast")))
#else
#define FUSED
#endif

static inline float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float exp_f32(float x) {
    float c = x < -104.0f ? -104.0f : x;  /* NaN compares false: it stays NaN, and is passed on below */
    c = c > 88.8f ? 88.8f : c;
    float t = c * 1.44269504088896341f + 12582912.0f;  /* round to nearest: 1.5 * 2^23 */
    float fn = t - 12582912.0f;
    float r = c - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    int32_t k = (int32_t)fn;
    int32_t k1 = k >> 1, k2 = k - k1;
    float y = p * bits_to_float((uint32_t)(k1 + 127) << 23) * bits_to_float((uint32_t)(k2 + 127) << 23);
    return x != x ? x : y;
}

static inline float row_max(const float *x, Py_ssize_t n) {
    float mk[SUMW], m = x[0];
    if (n < SUMW) {  /* a short row: no lanes to combine */
        for (Py_ssize_t j = 1; j < n; j++) m = x[j] > m ? x[j] : m;
        return m;
    }
    for (int k = 0; k < SUMW; k++) mk[k] = m;
    Py_ssize_t j = 0;
    for (; j + SUMW <= n; j += SUMW)
        for (int k = 0; k < SUMW; k++) mk[k] = x[j + k] > mk[k] ? x[j + k] : mk[k];
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    for (int k = 0; k < SUMW; k++) m = mk[k] > m ? mk[k] : m;
    return m;  /* NaN passes over a NaN, but the NaN's exp then makes the row NaN */
}

static inline float fixed_sum(const float *acc) {
    float s = 0.0f;
    for (int k = 0; k < SUMW; k++) s += acc[k];
    return s;
}

/* Rows are taken in blocks of at most CHUNK elements (a row longer than that alone): each
 * block's maxima and differences x - max row by row, their exponentials in one flat loop
 * (which vectorizes however short the rows are; a row's exp loop that also sums and stores
 * measured half as fast), then each row's sum and result. */
#define CHUNK 4096

static inline float block_sum(const float *e, Py_ssize_t n) {
    if (n < SUMW) {  /* a short row: each lane holds one element, so this is the lanes' sum */
        float s = 0.0f;
        for (Py_ssize_t j = 0; j < n; j++) s += e[j];
        return s;
    }
    float acc[SUMW] = {0};
    Py_ssize_t j = 0;
    for (; j + SUMW <= n; j += SUMW)
        for (int k = 0; k < SUMW; k++) acc[k] += e[j + k];
    for (int k = 0; j < n; j++, k++) acc[k] += e[j];
    return fixed_sum(acc);
}

static inline void exp_flat(const float *d, float *e, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i < len; i++) e[i] = exp_f32(d[i]);
}

/* out = exp(x - max) * (1 / sum), or (x - max) - log(sum) (log_); e: CHUNK floats of scratch. */
FUSED CLONES static void softmax_rows(const float *x, float *out, Py_ssize_t rows, Py_ssize_t n, int log_, float *e) {
    Py_ssize_t per = n >= CHUNK ? 1 : CHUNK / n;
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += per) {
        Py_ssize_t nr = rows - r0 < per ? rows - r0 : per;
        const float *xb = x + r0 * n;
        float *ob = out + r0 * n;
        for (Py_ssize_t i = 0; i < nr; i++) {
            float m = row_max(xb + i * n, n);
            for (Py_ssize_t j = 0; j < n; j++) ob[i * n + j] = xb[i * n + j] - m;
        }
        if (n >= CHUNK) {  /* one long row: its exponentials in place or in pieces */
            if (!log_) {
                exp_flat(ob, ob, n);
                float inv = 1.0f / block_sum(ob, n);
                for (Py_ssize_t j = 0; j < n; j++) ob[j] *= inv;
            } else {
                float s = 0.0f;
                for (Py_ssize_t j = 0; j < n; j += CHUNK) {
                    Py_ssize_t w = n - j < CHUNK ? n - j : CHUNK;
                    exp_flat(ob + j, e, w);
                    s += block_sum(e, w);
                }
                float c = logf(s);
                for (Py_ssize_t j = 0; j < n; j++) ob[j] -= c;
            }
            continue;
        }
        float *eb = log_ ? e : ob;
        exp_flat(ob, eb, nr * n);
        for (Py_ssize_t i = 0; i < nr; i++) {
            float s = block_sum(eb + i * n, n);
            float *o = ob + i * n;
            if (log_) {
                float c = logf(s);
                for (Py_ssize_t j = 0; j < n; j++) o[j] -= c;
            } else {
                float inv = 1.0f / s;
                for (Py_ssize_t j = 0; j < n; j++) o[j] *= inv;
            }
        }
    }
}

/* softmax: out = y * (g - sum(g * y)); log_softmax: out = g - exp(y) * sum(g). */
CLONES static void softmax_grad_rows(const float *g, const float *y, float *out, Py_ssize_t rows, Py_ssize_t n,
                                     int log_) {
    for (Py_ssize_t i = 0; i < rows; i++, g += n, y += n, out += n) {
        float acc[SUMW] = {0};
        Py_ssize_t j = 0;
        if (log_) {
            for (; j + SUMW <= n; j += SUMW)
                for (int k = 0; k < SUMW; k++) acc[k] += g[j + k];
            for (int k = 0; j < n; j++, k++) acc[k] += g[j];
        } else {
            for (; j + SUMW <= n; j += SUMW)
                for (int k = 0; k < SUMW; k++) acc[k] += g[j + k] * y[j + k];
            for (int k = 0; j < n; j++, k++) acc[k] += g[j] * y[j];
        }
        float s = fixed_sum(acc);
        if (log_) {
            for (j = 0; j < n; j++) out[j] = g[j] - exp_f32(y[j]) * s;
        } else {
            for (j = 0; j < n; j++) out[j] = y[j] * (g[j] - s);
        }
    }
}

/* float32 -> float16 bits, rounding to nearest even (IEEE 754), as numpy and F16C do. */
static inline uint16_t f32_to_f16_one(float f) {
    uint32_t u = float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)  /* inf, or NaN (kept quiet) */
        return sign | 0x7c00u | (a > 0x7f800000u ? (uint16_t)(0x200u | ((a >> 13) & 0x3ffu)) : 0);
    if (a >= 0x477ff000u) return sign | 0x7c00u;  /* rounds to beyond 65504: inf */
    if (a < 0x38800000u) {  /* below 2^-14: a float16 subnormal (or zero) */
        if (a < 0x33000000u) return sign;  /* at most 2^-25: rounds to zero */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;  /* 14..24: keeps 24 - shift bits of m */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return sign | (uint16_t)h;
    }
    uint32_t h = ((a >> 13) - (112u << 10));  /* rebias the exponent 127 -> 15 */
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return sign | (uint16_t)h;
}

static inline float f16_to_f32_one(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_to_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;  /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
}

#if HAVE_F16C_PATH
__attribute__((target("avx,f16c"))) static void to_f16_f16c(const float *x, uint16_t *out, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) out[i] = f32_to_f16_one(x[i]);
}

__attribute__((target("avx,f16c"))) static void to_f32_f16c(const uint16_t *x, float *out, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) out[i] = f16_to_f32_one(x[i]);
}
static int f16c(void) {  /* does this CPU convert in hardware (F16C, with AVX)? */
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    }
    return have;
}
#else
static int f16c(void) { return 0; }
#endif

/* portable: the loops a CPU without F16C runs (the tests run them everywhere) */
static void to_f16(const float *x, uint16_t *out, Py_ssize_t n, int portable) {
#if HAVE_F16C_PATH
    if (!portable && f16c()) { to_f16_f16c(x, out, n); return; }
#endif
    for (Py_ssize_t i = 0; i < n; i++) out[i] = f32_to_f16_one(x[i]);
}

static void to_f32(const uint16_t *x, float *out, Py_ssize_t n, int portable) {
#if HAVE_F16C_PATH
    if (!portable && f16c()) { to_f32_f16c(x, out, n); return; }
#endif
    for (Py_ssize_t i = 0; i < n; i++) out[i] = f16_to_f32_one(x[i]);
}

/* --- reductions ---------------------------------------------------------------------------
 * sum, max and min of float32 / float64 over one axis of a C-contiguous array seen as (outer, k,
 * inner): out[o, i] = the reduction over j of x[o, j, i]. Along the last axis (inner == 1) the
 * sum is a pairwise sum in numpy's blocking (blocks of up to 128 in eight partial sums, halves
 * above that, rounded to a multiple of 8), started from 0 as numpy's reduction is, so results
 * are numpy's bits; along another axis rows are added in order, as numpy does. max and min
 * return NaN where a NaN is reduced. */
#define PW_BLOCK 128
#define EXW 64  /* lanes of the max/min and NaN scans: four vectors in flight (their order does not matter) */
#define DEFINE_REDUCE(T, S)                                                                                  \
    static inline T fixed_sum_ex_##S(const T *acc) {                                                         \
        T s = 0;                                                                                             \
        for (int k = 0; k < EXW; k++) s += acc[k];                                                           \
        return s;                                                                                            \
    }                                                                                                        \
    static T pairwise_##S(const T *a, Py_ssize_t n) {                                                        \
        if (n < 8) {                                                                                         \
            T r = (T)0;                                                                                      \
            for (Py_ssize_t i = 0; i < n; i++) r += a[i];                                                    \
            return r;                                                                                        \
        }                                                                                                    \
        if (n <= PW_BLOCK) {                                                                                 \
            T r[8];                                                                                          \
            for (int j = 0; j < 8; j++) r[j] = a[j];                                                         \
            Py_ssize_t i = 8;                                                                                \
            for (; i < n - n % 8; i += 8)                                                                    \
                for (int j = 0; j < 8; j++) r[j] += a[i + j];                                                \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                       \
            for (; i < n; i++) res += a[i];                                                                  \
            return res;                                                                                      \
        }                                                                                                    \
        Py_ssize_t n2 = n / 2;                                                                               \
        n2 -= n2 % 8;                                                                                        \
        return pairwise_##S(a, n2) + pairwise_##S(a + n2, n - n2);                                           \
    }                                                                                                        \
    /* is b the new extreme after a (max: greater; min: less), or a NaN? */                                  \
    static inline T pick_##S(T a, T b, int mx) { return (mx ? b > a : b < a) || b != b ? b : a; }           \
    /* the pairwise sum of (a[i] - m)^2, each difference and square rounded as numpy's var rounds \
     * its arrays x - mean and x * x */                                                                  \
    static T pairwise_sq_##S(const T *a, Py_ssize_t n, T m) {                                                \
        if (n < 8) {                                                                                         \
            T r = (T)0;                                                                                      \
            for (Py_ssize_t i = 0; i < n; i++) { T d = a[i] - m; r += d * d; }                               \
            return r;                                                                                        \
        }                                                                                                    \
        if (n <= PW_BLOCK) {                                                                                 \
            T r[8];                                                                                          \
            for (int j = 0; j < 8; j++) { T d = a[j] - m; r[j] = d * d; }                                    \
            Py_ssize_t i = 8;                                                                                \
            for (; i < n - n % 8; i += 8)                                                                    \
                for (int j = 0; j < 8; j++) { T d = a[i + j] - m; r[j] += d * d; }                           \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                       \
            for (; i < n; i++) { T d = a[i] - m; res += d * d; }                                             \
            return res;                                                                                      \
        }                                                                                                    \
        Py_ssize_t n2 = n / 2;                                                                               \
        n2 -= n2 % 8;                                                                                        \
        return pairwise_sq_##S(a, n2, m) + pairwise_sq_##S(a + n2, n - n2, m);                               \
    }                                                                                                        \
    /* np.var of a whole array: the mean (its sum divided by n in float64, rounded to T), the sum of \
     * squared deviations, divided by n - correction in float64 */                                         \
    CLONES static T var_##S(const T *a, Py_ssize_t n, double correction) {                                   \
        T mean = (T)((double)((T)0 + pairwise_##S(a, n)) / (double)n);                                       \
        return (T)((double)((T)0 + pairwise_sq_##S(a, n, mean)) / ((double)n - correction));                 \
    }                                                                                                        \
    /* does a hold a NaN or an infinity? (x * 0 is NaN for both; summed in EXW lanes) */           \
    static int special_##S(const T *a, Py_ssize_t n) {                                                       \
        T lane[EXW] = {0};                                                                                  \
        Py_ssize_t j = 0;                                                                                    \
        for (; j + EXW <= n; j += EXW)                                                                     \
            for (int k = 0; k < EXW; k++) lane[k] += a[j + k] * (T)0;                                       \
        T t = fixed_sum_ex_##S(lane);                                                                           \
        for (; j < n; j++) t += a[j] * (T)0;                                                                 \
        return t != t;                                                                                       \
    }                                                                                                        \
    /* max (mx) or min of a[0..n): without NaNs, the compare-and-select that vectorizes as one      \
     * max/min instruction; with them (nan), a NaN wins every comparison */                               \
    static T extreme_##S(const T *a, Py_ssize_t n, int mx, int nan) {                                        \
        T lane[EXW], m = a[0];                                                                              \
        for (int k = 0; k < EXW; k++) lane[k] = m;                                                          \
        Py_ssize_t j = 0;                                                                                    \
        if (nan) {                                                                                           \
            for (; j < n; j++) m = pick_##S(m, a[j], mx);                                                    \
            return m;                                                                                        \
        }                                                                                                    \
        if (mx)                                                                                              \
            for (; j + EXW <= n; j += EXW)                                                                 \
                for (int k = 0; k < EXW; k++) lane[k] = a[j + k] > lane[k] ? a[j + k] : lane[k];            \
        else                                                                                                 \
            for (; j + EXW <= n; j += EXW)                                                                 \
                for (int k = 0; k < EXW; k++) lane[k] = a[j + k] < lane[k] ? a[j + k] : lane[k];            \
        for (; j < n; j++) m = pick_##S(m, a[j], mx);                                                        \
        for (int k = 0; k < EXW; k++) m = pick_##S(m, lane[k], mx);                                         \
        return m;                                                                                            \
    }                                                                                                        \
    CLONES static void reduce_##S(const T *x, T *out, Py_ssize_t outer, Py_ssize_t k, Py_ssize_t inner, int op) { \
        int nan = op != 0 && special_##S(x, outer * k * inner);                                              \
        for (Py_ssize_t o = 0; o < outer; o++, x += k * inner, out += inner) {                               \
            if (inner == 1) {                                                                                \
                out[0] = op == 0 ? (T)0 + pairwise_##S(x, k) : extreme_##S(x, k, op == 1, nan);              \
                continue;                                                                                    \
            }                                                                                                \
            for (Py_ssize_t i = 0; i < inner; i++) out[i] = op == 0 ? (T)0 + x[i] : x[i];                   \
            for (Py_ssize_t j = 1; j < k; j++) {                                                             \
                const T *r = x + j * inner;                                                                  \
                if (op == 0)                                                                                 \
                    for (Py_ssize_t i = 0; i < inner; i++) out[i] += r[i];                                   \
                else if (nan)                                                                                \
                    for (Py_ssize_t i = 0; i < inner; i++) out[i] = pick_##S(out[i], r[i], op == 1);         \
                else if (op == 1)                                                                            \
                    for (Py_ssize_t i = 0; i < inner; i++) out[i] = r[i] > out[i] ? r[i] : out[i];           \
                else                                                                                         \
                    for (Py_ssize_t i = 0; i < inner; i++) out[i] = r[i] < out[i] ? r[i] : out[i];           \
            }                                                                                                \
        }                                                                                                    \
    }
DEFINE_REDUCE(float, f32)
DEFINE_REDUCE(double, f64)

/* --- Python bindings: buffers in, results written into the last one; True, or False where the
 * kernel does not apply (a buffer that is not C-contiguous, or empty rows) -------------------- */
static int get(PyObject *o, Py_buffer *b, int writable) {
    if (PyObject_GetBuffer(o, b, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) == 0) return 1;
    if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();  /* not C-contiguous: the caller's numpy kernel */
        return 0;
    }
    return -1;
}
#define GET(o, b, w, cleanup) do { int r_ = get(o, b, w); if (r_ <= 0) { cleanup; if (r_ < 0) return NULL; Py_RETURN_FALSE; } } while (0)

static PyObject *py_softmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* softmax(x, out, n, log) */
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "softmax(x, out, n, log)"); return NULL; }
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    int log_ = PyObject_IsTrue(args[3]);
    if ((n == -1 && PyErr_Occurred()) || log_ < 0) return NULL;
    if (n <= 0) Py_RETURN_FALSE;
    Py_buffer bx, bo;
    GET(args[0], &bx, 0, (void)0);
    GET(args[1], &bo, 1, PyBuffer_Release(&bx));
    Py_ssize_t len = bx.len / 4;
    if (bo.len != bx.len || len % n) {
        PyErr_SetString(PyExc_ValueError, "softmax: buffers of different sizes, or not whole rows");
    } else {
        float scratch[CHUNK];
        Py_BEGIN_ALLOW_THREADS
        softmax_rows((const float *)bx.buf, (float *)bo.buf, len / n, n, log_, scratch);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_softmax_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* softmax_grad(g, y, out, n, log) */
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "softmax_grad(g, y, out, n, log)"); return NULL; }
    Py_ssize_t n = PyLong_AsSsize_t(args[3]);
    int log_ = PyObject_IsTrue(args[4]);
    if ((n == -1 && PyErr_Occurred()) || log_ < 0) return NULL;
    if (n <= 0) Py_RETURN_FALSE;
    Py_buffer bg, by, bo;
    GET(args[0], &bg, 0, (void)0);
    GET(args[1], &by, 0, PyBuffer_Release(&bg));
    GET(args[2], &bo, 1, (PyBuffer_Release(&bg), PyBuffer_Release(&by)));
    Py_ssize_t len = bg.len / 4;
    if (by.len != bg.len || bo.len != bg.len || len % n) {
        PyErr_SetString(PyExc_ValueError, "softmax_grad: buffers of different sizes, or not whole rows");
    } else {
        Py_BEGIN_ALLOW_THREADS
        softmax_grad_rows((const float *)bg.buf, (const float *)by.buf, (float *)bo.buf, len / n, n, log_);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bg);
    PyBuffer_Release(&by);
    PyBuffer_Release(&bo);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *convert(PyObject *const *args, Py_ssize_t nargs, int to_half) {
    /* to_f16(x, out[, portable]) / to_f32(x, out[, portable]) */
    if (nargs != 2 && nargs != 3) { PyErr_SetString(PyExc_TypeError, "(x, out[, portable])"); return NULL; }
    int portable = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (portable < 0) return NULL;
    Py_buffer bx, bo;
    GET(args[0], &bx, 0, (void)0);
    GET(args[1], &bo, 1, PyBuffer_Release(&bx));
    Py_ssize_t n = to_half ? bx.len / 4 : bx.len / 2;
    if ((to_half ? bo.len / 2 : bo.len / 4) != n) {
        PyErr_SetString(PyExc_ValueError, "conversion: buffers of different element counts");
    } else if (to_half) {
        Py_BEGIN_ALLOW_THREADS
        to_f16((const float *)bx.buf, (uint16_t *)bo.buf, n, portable);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        to_f32((const uint16_t *)bx.buf, (float *)bo.buf, n, portable);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_to_f16(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { return convert(args, nargs, 1); }
static PyObject *py_to_f32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { return convert(args, nargs, 0); }

static PyObject *py_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* reduce(x, out, outer, k, inner, op, double): op 0 sum, 1 max, 2 min */
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "reduce(x, out, outer, k, inner, op, double)"); return NULL; }
    Py_ssize_t outer = PyLong_AsSsize_t(args[2]), k = PyLong_AsSsize_t(args[3]), inner = PyLong_AsSsize_t(args[4]);
    long op = PyLong_AsLong(args[5]);
    int dbl = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || dbl < 0) return NULL;
    if (outer <= 0 || k <= 0 || inner <= 0 || op < 0 || op > 2) Py_RETURN_FALSE;
    Py_ssize_t size = dbl ? 8 : 4;
    Py_buffer bx, bo;
    GET(args[0], &bx, 0, (void)0);
    GET(args[1], &bo, 1, PyBuffer_Release(&bx));
    if (bx.len != outer * k * inner * size || bo.len != outer * inner * size) {
        PyErr_SetString(PyExc_ValueError, "reduce: buffer sizes do not match (outer, k, inner)");
    } else if (dbl) {
        Py_BEGIN_ALLOW_THREADS
        reduce_f64((const double *)bx.buf, (double *)bo.buf, outer, k, inner, (int)op);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        reduce_f32((const float *)bx.buf, (float *)bo.buf, outer, k, inner, (int)op);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_var(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* var(x, correction, double) -> float: np.var of the whole of x */
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "var(x, correction, double)"); return NULL; }
    double correction = PyFloat_AsDouble(args[1]);
    int dbl = PyObject_IsTrue(args[2]);
    if ((correction == -1.0 && PyErr_Occurred()) || dbl < 0) return NULL;
    Py_buffer bx;
    int r = get(args[0], &bx, 0);
    if (r <= 0) { if (r < 0) return NULL; Py_RETURN_NONE; }
    Py_ssize_t n = bx.len / (dbl ? 8 : 4);
    double v = 0.0;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        v = dbl ? var_f64((const double *)bx.buf, n, correction) : (double)var_f32((const float *)bx.buf, n, correction);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    if (n <= 0) Py_RETURN_NONE;
    return PyFloat_FromDouble(v);
}

/* --- kernel call wrappers: the calling layers of kernels.py's Python wrappers, in C --------------
 * Each is a callable object the dispatcher calls as it calls any kernel, ``k(ctx, *inputs, **attrs)``:
 * - plain(fn): fn(*inputs, **attrs) (kernels.py's _plain);
 * - quiet(fn, generic, halves, half_set, var, ignore): fn(*inputs) with numpy's floating-point
 *   warnings off (the contextvar ``var`` set to ``ignore`` around the call, as _ufunc_kernel does),
 *   ``generic(ctx, ...)`` for keyword calls and, where ``halves`` is not None, for float16/bfloat16
 *   inputs (``half_set``, filled by calling ``halves()`` the first time it is empty);
 * - astype(generic, empty, ndarray, f16, f32): float32 <-> float16 of a C-contiguous ndarray in
 *   to_f16/to_f32 (as native.convert does it), ``generic(ctx, x, dtype, copy)`` otherwise;
 * - concat(generic, empty, ndarray): C-contiguous arrays of one dtype joined along an int axis by
 *   copying rows, ``generic(ctx, arrays, axis)`` otherwise;
 * - where(generic, empty, ndarray): a bool condition selecting between two C-contiguous arrays
 *   of one dtype and one shape, ``generic(ctx, cond, x, y)`` otherwise;
 * - extreme(op, generic, empty, ndarray): max (op 1) or min (2) of a C-contiguous float32/float64
 *   ndarray over all axes or one, in reduce_f32/f64 above, into ``empty(shape, dtype)``;
 *   ``generic(ctx, x, axis, keepdims)`` otherwise. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;  /* 0 plain, 1 quiet, 2 extreme, 3 astype, 4 concat, 5 where */
    int op;
    PyObject *fn, *generic, *halves, *half_set, *var, *ignore, *empty;  /* astype: halves float16, half_set float32 */
} Wrapper;

static PyObject *s_dtype, *s_np, *s_shape;

static PyObject *call_generic(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(w->generic, args, PyVectorcall_NARGS(nargsf), kwnames);
}

static PyObject *plain_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n < 1) { PyErr_SetString(PyExc_TypeError, "kernel(ctx, *inputs): no context"); return NULL; }
    return PyObject_Vectorcall(((Wrapper *)self)->fn, args + 1, n - 1, kwnames);
}

static PyObject *quiet_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n < 2 || (kwnames && PyTuple_GET_SIZE(kwnames)))
        return call_generic(w, args, nargsf, kwnames);
    if (w->halves != Py_None) {
        if (PySet_GET_SIZE(w->half_set) == 0) {
            PyObject *r = PyObject_CallNoArgs(w->halves);
            if (r == NULL) return NULL;
            Py_DECREF(r);
        }
        PyObject *dt = PyObject_GetAttr(args[1], s_dtype);
        if (dt == NULL) {
            PyErr_Clear();
            return call_generic(w, args, nargsf, kwnames);
        }
        int half = PySet_Contains(w->half_set, dt);
        Py_DECREF(dt);
        if (half) {
            if (half < 0) PyErr_Clear();
            return call_generic(w, args, nargsf, kwnames);
        }
    }
    PyObject *token = PyContextVar_Set(w->var, w->ignore);
    if (token == NULL) return NULL;
    PyObject *out = PyObject_Vectorcall(w->fn, args + 1, n - 1, NULL);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int bad = PyContextVar_Reset(w->var, token);
    Py_DECREF(token);
    if (bad) {
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        Py_XDECREF(out);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    return out;
}

/* axis (None, an int, or a tuple of one int or of every axis) and keepdims (a bool) as a reduction
 * (outer, k, inner) of shape and its result's shape; 0: not one of these forms. */
static int geometry(PyObject *axis, int keepdims, const Py_ssize_t *shape, int nd, Py_ssize_t *outer,
                    Py_ssize_t *k, Py_ssize_t *inner, PyObject **oshape) {
    long a = -1;
    int all = axis == Py_None;
    if (!all && PyTuple_CheckExact(axis)) {
        Py_ssize_t m = PyTuple_GET_SIZE(axis);
        if (m == nd) all = 1;
        else if (m == 1) axis = PyTuple_GET_ITEM(axis, 0);
        else return 0;
    }
    if (!all) {
        if (!PyLong_CheckExact(axis)) return 0;
        a = PyLong_AsLong(axis);
        if (a == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        if (a < -nd || a >= nd) return 0;
        if (a < 0) a += nd;
    }
    *outer = 1; *k = 1; *inner = 1;
    for (int i = 0; i < nd; i++) {
        if (all || i == a) *k *= shape[i];
        else if (i < a) *outer *= shape[i];
        else *inner *= shape[i];
    }
    Py_ssize_t m = keepdims ? nd : (all ? 0 : nd - 1);
    PyObject *t = PyTuple_New(m);
    if (t == NULL) return -1;
    for (int i = 0, j = 0; i < nd; i++) {
        if (!keepdims && (all || i == a)) continue;
        PyObject *v = PyLong_FromSsize_t(all || i == a ? 1 : shape[i]);
        if (v == NULL) { Py_DECREF(t); return -1; }
        PyTuple_SET_ITEM(t, j++, v);
    }
    *oshape = t;
    return 1;
}

static PyObject *extreme_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *x = NULL, *axis = NULL, *keepdims = NULL;
    if (n + nk != 4 || n < 2 || Py_TYPE(args[1]) != (PyTypeObject *)w->fn)  /* w->fn: numpy.ndarray */
        return call_generic(w, args, nargsf, kwnames);
    x = args[1];
    if (n > 2) axis = args[2];
    if (n > 3) keepdims = args[3];
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "axis") == 0 && axis == NULL) axis = args[n + i];
        else if (PyUnicode_CompareWithASCIIString(name, "keepdims") == 0 && keepdims == NULL) keepdims = args[n + i];
        else return call_generic(w, args, nargsf, kwnames);
    }
    if (axis == NULL || keepdims == NULL || (keepdims != Py_True && keepdims != Py_False))
        return call_generic(w, args, nargsf, kwnames);
    Py_buffer bx;
    if (PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        return call_generic(w, args, nargsf, kwnames);
    }
    int dbl = bx.format && strcmp(bx.format, "d") == 0;
    int flt = bx.format && strcmp(bx.format, "f") == 0;
    Py_ssize_t outer, k, inner;
    PyObject *oshape = NULL;
    int g = (dbl || flt) && bx.len > 0 && bx.ndim <= 32
        ? geometry(axis, keepdims == Py_True, bx.shape, bx.ndim, &outer, &k, &inner, &oshape) : 0;
    if (g <= 0) {
        PyBuffer_Release(&bx);
        return g < 0 ? NULL : call_generic(w, args, nargsf, kwnames);
    }
    PyObject *dt = PyObject_GetAttr(x, s_dtype), *out = NULL;
    if (dt != NULL) {
        PyObject *a2[2] = {oshape, dt};
        out = PyObject_Vectorcall(w->empty, a2, 2, NULL);
        Py_DECREF(dt);
    }
    Py_DECREF(oshape);
    Py_buffer bo;
    if (out == NULL || PyObject_GetBuffer(out, &bo, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyBuffer_Release(&bx);
        Py_XDECREF(out);
        return NULL;
    }
    if (bo.len != outer * inner * (dbl ? 8 : 4)) {
        PyErr_SetString(PyExc_ValueError, "extreme: the result's size does not match");
        Py_CLEAR(out);
    } else {
        PyThreadState *ts = bx.len >= (1 << 16) ? PyEval_SaveThread() : NULL;  /* a large one: other threads run */
        if (dbl) reduce_f64((const double *)bx.buf, (double *)bo.buf, outer, k, inner, w->op);
        else reduce_f32((const float *)bx.buf, (float *)bo.buf, outer, k, inner, w->op);
        if (ts != NULL) PyEval_RestoreThread(ts);
    }
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bx);
    return out;
}

/* astype(ctx, x, dtype, copy=True): float32 <-> float16 of a non-empty C-contiguous ndarray, in
 * to_f16/to_f32 above (as native.convert); ``generic`` otherwise. Without Python frames this beats
 * numpy's cast at every size (native.convert, which is called from Python, leaves small arrays to
 * numpy). */
#define CONVERT_MIN 1
static PyObject *astype_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (n < 2 || n + nk > 4 || Py_TYPE(args[1]) != (PyTypeObject *)w->fn)
        return call_generic(w, args, nargsf, kwnames);
    PyObject *x = args[1], *dtype = n > 2 ? args[2] : NULL;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "dtype") == 0 && dtype == NULL) dtype = args[n + i];
        else if (PyUnicode_CompareWithASCIIString(name, "copy") != 0) return call_generic(w, args, nargsf, kwnames);
    }
    if (dtype == NULL)
        return call_generic(w, args, nargsf, kwnames);
    PyObject *to = PyObject_GetAttr(dtype, s_np), *from = to == NULL ? NULL : PyObject_GetAttr(x, s_dtype);
    int half = to == w->halves && from == w->half_set, single = to == w->half_set && from == w->halves;
    Py_XDECREF(from);
    if (to == NULL || !(half || single)) {
        Py_XDECREF(to);
        PyErr_Clear();
        return call_generic(w, args, nargsf, kwnames);
    }
    Py_buffer bx;
    if (PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        Py_DECREF(to);
        return call_generic(w, args, nargsf, kwnames);
    }
    Py_ssize_t count = bx.len / (half ? 4 : 2);
    if (count < CONVERT_MIN) {
        PyBuffer_Release(&bx);
        Py_DECREF(to);
        return call_generic(w, args, nargsf, kwnames);
    }
    PyObject *shape = PyObject_GetAttr(x, s_shape), *out = NULL;
    if (shape != NULL) {
        PyObject *a2[2] = {shape, to};
        out = PyObject_Vectorcall(w->empty, a2, 2, NULL);
        Py_DECREF(shape);
    }
    Py_DECREF(to);
    Py_buffer bo;
    if (out == NULL || PyObject_GetBuffer(out, &bo, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyBuffer_Release(&bx);
        Py_XDECREF(out);
        return NULL;
    }
    if (bo.len != count * (half ? 2 : 4)) {
        PyErr_SetString(PyExc_ValueError, "astype: the result's size does not match");
        Py_CLEAR(out);
    } else {
        PyThreadState *ts = bx.len >= (1 << 16) ? PyEval_SaveThread() : NULL;
        if (half) to_f16((const float *)bx.buf, (uint16_t *)bo.buf, count, 0);
        else to_f32((const uint16_t *)bx.buf, (float *)bo.buf, count, 0);
        if (ts != NULL) PyEval_RestoreThread(ts);
    }
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bx);
    return out;
}

/* ``empty(shape, dtype)`` and its writable C-contiguous buffer in ``bo``: the result a kernel
 * fills, or NULL with the error set (no memory). */
static PyObject *new_result(Wrapper *w, PyObject *shape, PyObject *dtype, Py_buffer *bo) {
    PyObject *a2[2] = {shape, dtype};
    PyObject *out = PyObject_Vectorcall(w->empty, a2, 2, NULL);
    if (out != NULL && PyObject_GetBuffer(out, bo, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) Py_CLEAR(out);
    return out;
}

/* concat(ctx, arrays, axis): C-contiguous ndarrays of one dtype (the same dtype object, no
 * Python objects inside) joined along an int axis by copying each one's rows of that axis in
 * turn; ``generic`` otherwise (axis None, strided inputs, mismatched shapes: numpy's errors). */
#define CONCAT_MAX 32
static PyObject *concat_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *seq = n > 1 ? args[1] : NULL, *axis = n > 2 ? args[2] : NULL;
    if (n + nk != 3 || seq == NULL || !(PyList_CheckExact(seq) || PyTuple_CheckExact(seq)))
        return call_generic(w, args, nargsf, kwnames);
    if (nk == 1) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "axis") != 0)
            return call_generic(w, args, nargsf, kwnames);
        axis = args[n];
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (axis == NULL || !PyLong_CheckExact(axis) || m < 1 || m > CONCAT_MAX)
        return call_generic(w, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < m; i++)
        if (Py_TYPE(items[i]) != (PyTypeObject *)w->fn)
            return call_generic(w, args, nargsf, kwnames);
    long a = PyLong_AsLong(axis);
    if (a == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return call_generic(w, args, nargsf, kwnames);
    }
    Py_buffer b[CONCAT_MAX];
    Py_ssize_t got = 0;
    PyObject *dt = PyObject_GetAttr(items[0], s_dtype), *out = NULL, *shape = NULL;
    int ok = dt != NULL;
    for (; ok && got < m; got++) {
        if (PyObject_GetBuffer(items[got], &b[got], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
            ok = 0;
            break;
        }
        const char *f = b[got].format ? b[got].format : "B";
        PyObject *d = got ? PyObject_GetAttr(items[got], s_dtype) : NULL;
        ok = strchr(f, 'O') == NULL && strchr(f, 'T') == NULL && b[got].ndim >= 1 && b[got].ndim == b[0].ndim
             && b[got].itemsize == b[0].itemsize && (got == 0 || d == dt);
        Py_XDECREF(d);
    }
    int nd = ok ? b[0].ndim : 0;
    if (ok) {
        if (a < -nd || a >= nd) ok = 0;
        else if (a < 0) a += nd;
    }
    for (Py_ssize_t i = 1; ok && i < m; i++)
        for (int j = 0; ok && j < nd; j++)
            ok = j == a || b[i].shape[j] == b[0].shape[j];
    Py_ssize_t outer = 1, inner = 1, total = 0;
    Py_buffer bo;
    int failed = 0;  /* an error to raise (no memory), not a call to hand to numpy */
    if (ok) {
        for (int j = 0; j < a; j++) outer *= b[0].shape[j];
        for (int j = (int)a + 1; j < nd; j++) inner *= b[0].shape[j];
        for (Py_ssize_t i = 0; i < m; i++) total += b[i].shape[a];
        shape = PyTuple_New(nd);
        for (int j = 0; shape != NULL && j < nd; j++) {
            PyObject *v = PyLong_FromSsize_t(j == a ? total : b[0].shape[j]);
            if (v == NULL) Py_CLEAR(shape);
            else PyTuple_SET_ITEM(shape, j, v);
        }
        if (shape != NULL) out = new_result(w, shape, dt, &bo);
        failed = out == NULL;
    }
    if (out != NULL) {
        {
            Py_ssize_t row = inner * b[0].itemsize;
            PyThreadState *ts = bo.len >= (1 << 16) ? PyEval_SaveThread() : NULL;
            char *dst = (char *)bo.buf;
            for (Py_ssize_t o = 0; o < outer; o++)
                for (Py_ssize_t i = 0; i < m; i++) {
                    Py_ssize_t chunk = b[i].shape[a] * row;
                    if (chunk) memcpy(dst, (const char *)b[i].buf + o * chunk, (size_t)chunk);
                    dst += chunk;
                }
            if (ts != NULL) PyEval_RestoreThread(ts);
            PyBuffer_Release(&bo);
        }
    }
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    Py_XDECREF(shape);
    Py_XDECREF(dt);
    if (out != NULL || failed)
        return out;
    PyErr_Clear();  /* a buffer numpy does not export C-contiguous, or a form left to numpy */
    return call_generic(w, args, nargsf, kwnames);
}

/* where(ctx, cond, x, y): a bool ndarray and two ndarrays of one dtype (the same dtype object, one
 * native format character, no Python objects), all C-contiguous and of one shape, selected element
 * by element into ``empty(shape, dtype)`` (the bits of x or y, as np.where copies them);
 * ``generic`` otherwise (broadcasting, mixed dtypes, strided inputs: numpy's where). */
#define WHERE_SELECT(T)                                                                      \
    do {                                                                                     \
        const T *px = (const T *)bx.buf, *py = (const T *)by.buf;                            \
        T *po = (T *)bo.buf;                                                                 \
        for (Py_ssize_t i = 0; i < count; i++) { /* both loads unconditional: a vector blend */ \
            T a = px[i], b = py[i];                                                          \
            po[i] = c[i] ? a : b;                                                            \
        }                                                                                    \
    } while (0)

static PyObject *where_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 4 || (kwnames && PyTuple_GET_SIZE(kwnames)))
        return call_generic(w, args, nargsf, kwnames);
    PyObject *cond = args[1], *x = args[2], *y = args[3];
    PyTypeObject *nd = (PyTypeObject *)w->fn;
    if (Py_TYPE(cond) != nd || Py_TYPE(x) != nd || Py_TYPE(y) != nd)
        return call_generic(w, args, nargsf, kwnames);
    PyObject *dx = PyObject_GetAttr(x, s_dtype), *dy = PyObject_GetAttr(y, s_dtype);
    int same = dx != NULL && dx == dy;
    Py_XDECREF(dy);
    if (!same) {
        Py_XDECREF(dx);
        PyErr_Clear();
        return call_generic(w, args, nargsf, kwnames);
    }
    Py_buffer bc, bx, by;
    int got = 0, ok = 1;
    if (PyObject_GetBuffer(cond, &bc, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) got = 1;
    if (got == 1 && PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) got = 2;
    if (got == 2 && PyObject_GetBuffer(y, &by, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) got = 3;
    if (got < 3) ok = 0;
    if (ok) {
        const char *fc = bc.format ? bc.format : "B", *fx = bx.format ? bx.format : "B";
        ok = strcmp(fc, "?") == 0 && strlen(fx) == 1 && strchr("?bBhHiIlLqQefd", fx[0]) != NULL
             && bx.ndim == bc.ndim && by.ndim == bc.ndim && bx.itemsize == by.itemsize;
        for (int j = 0; ok && j < bc.ndim; j++)
            ok = bx.shape[j] == bc.shape[j] && by.shape[j] == bc.shape[j];
    }
    PyObject *out = NULL, *shape = NULL;
    Py_buffer bo;
    int failed = 0;
    if (ok) {
        shape = PyObject_GetAttr(x, s_shape);
        if (shape != NULL) out = new_result(w, shape, dx, &bo);
        failed = out == NULL;
    }
    if (out != NULL) {
        {
            const unsigned char *c = (const unsigned char *)bc.buf;
            Py_ssize_t count = bc.len;  /* one byte per bool element */
            PyThreadState *ts = bo.len >= (1 << 16) ? PyEval_SaveThread() : NULL;
            switch (bx.itemsize) {
                case 1: WHERE_SELECT(uint8_t); break;
                case 2: WHERE_SELECT(uint16_t); break;
                case 4: WHERE_SELECT(uint32_t); break;
                default: WHERE_SELECT(uint64_t); break;
            }
            if (ts != NULL) PyEval_RestoreThread(ts);
            PyBuffer_Release(&bo);
        }
    }
    if (got >= 3) PyBuffer_Release(&by);
    if (got >= 2) PyBuffer_Release(&bx);
    if (got >= 1) PyBuffer_Release(&bc);
    Py_XDECREF(shape);
    Py_DECREF(dx);
    if (out != NULL || failed)
        return out;
    PyErr_Clear();  /* a form left to numpy */
    return call_generic(w, args, nargsf, kwnames);
}

static int wrapper_traverse(Wrapper *w, visitproc visit, void *arg) {
    Py_VISIT(w->fn); Py_VISIT(w->generic); Py_VISIT(w->halves); Py_VISIT(w->half_set); Py_VISIT(w->var);
    Py_VISIT(w->ignore); Py_VISIT(w->empty);
    return 0;
}

static int wrapper_clear(Wrapper *w) {
    Py_CLEAR(w->fn); Py_CLEAR(w->generic); Py_CLEAR(w->halves); Py_CLEAR(w->half_set); Py_CLEAR(w->var);
    Py_CLEAR(w->ignore); Py_CLEAR(w->empty);
    return 0;
}

static void wrapper_dealloc(Wrapper *w) {
    PyObject_GC_UnTrack(w);
    wrapper_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *wrapper_repr(Wrapper *w) {
    static const char *kinds[] = {"plain", "quiet", "extreme", "astype", "concat", "where"};
    return PyUnicode_FromFormat("<cpu kernel %s(%R)>", kinds[w->kind], w->kind >= 2 ? w->generic : w->fn);
}

static PyTypeObject WrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice_cpu._native.Kernel",
    .tp_basicsize = sizeof(Wrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A cpu kernel's calling layer in C (plain(), quiet() or extreme())",
    .tp_dealloc = (destructor)wrapper_dealloc,
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),
    .tp_repr = (reprfunc)wrapper_repr,
};

static PyObject *new_wrapper(int kind, vectorcallfunc call, PyObject *fields[7]) {
    Wrapper *w = PyObject_GC_New(Wrapper, &WrapperType);
    if (w == NULL) return NULL;
    w->vectorcall = call;
    w->kind = kind;
    w->op = 0;
    PyObject **slots[] = {&w->fn, &w->generic, &w->halves, &w->half_set, &w->var, &w->ignore, &w->empty};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(fields[i] ? fields[i] : Py_None);
        *slots[i] = fields[i] ? fields[i] : Py_None;
    }
    PyObject_GC_Track(w);
    return (PyObject *)w;
}

static PyObject *py_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyCallable_Check(args[0])) { PyErr_SetString(PyExc_TypeError, "plain(fn)"); return NULL; }
    PyObject *f[7] = {args[0], NULL, NULL, NULL, NULL, NULL, NULL};
    return new_wrapper(0, plain_call, f);
}

static PyObject *py_quiet(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])
            || !(args[2] == Py_None || (PyCallable_Check(args[2]) && PySet_Check(args[3])))
            || !PyContextVar_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "quiet(fn, generic, halves, half_set, var, ignore)");
        return NULL;
    }
    PyObject *f[7] = {args[0], args[1], args[2], args[3], args[4], args[5], NULL};
    return new_wrapper(1, quiet_call, f);
}

static PyObject *py_extreme(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long op = nargs == 4 ? PyLong_AsLong(args[0]) : -1;
    if (nargs != 4 || (op != 1 && op != 2) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])
            || !PyType_Check(args[3])) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "extreme(op: 1 max or 2 min, generic, empty, ndarray)");
        return NULL;
    }
    PyObject *f[7] = {args[3], args[1], NULL, NULL, NULL, NULL, args[2]};
    PyObject *w = new_wrapper(2, extreme_call, f);
    if (w != NULL) ((Wrapper *)w)->op = (int)op;
    return w;
}

static PyObject *py_astype(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "astype(generic, empty, ndarray, float16 dtype, float32 dtype)");
        return NULL;
    }
    PyObject *f[7] = {args[2], args[0], args[3], args[4], NULL, NULL, args[1]};
    return new_wrapper(3, astype_call, f);
}

/* A wrapper made from (generic, empty, ndarray): concat's and where's. */
static PyObject *array_wrapper(int kind, vectorcallfunc call, const char *usage, PyObject *const *args,
                               Py_ssize_t nargs) {
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyObject *f[7] = {args[2], args[0], NULL, NULL, NULL, NULL, args[1]};
    return new_wrapper(kind, call, f);
}

static PyObject *py_concat(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return array_wrapper(4, concat_call, "concat(generic, empty, ndarray)", args, nargs);
}

static PyObject *py_where(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return array_wrapper(5, where_call, "where(generic, empty, ndarray)", args, nargs);
}

static PyMethodDef methods[] = {
    {"var", (PyCFunction)(void (*)(void))py_var, METH_FASTCALL,
     "var(x, correction, double): np.var of all of x (float32 or float64), or None where x is not C-contiguous or empty"},
    {"reduce", (PyCFunction)(void (*)(void))py_reduce, METH_FASTCALL,
     "reduce(x, out, outer, k, inner, op, double): sum (op 0), max (1) or min (2) over the middle of (outer, k, inner)"},
    {"softmax", (PyCFunction)(void (*)(void))py_softmax, METH_FASTCALL,
     "softmax(x, out, n, log): softmax (log: log_softmax) of float32 rows of n, into out"},
    {"softmax_grad", (PyCFunction)(void (*)(void))py_softmax_grad, METH_FASTCALL,
     "softmax_grad(g, y, out, n, log): the gradient of softmax (log: log_softmax) from its output y"},
    {"to_f16", (PyCFunction)(void (*)(void))py_to_f16, METH_FASTCALL,
     "to_f16(x, out[, portable]): float32 to float16 bits, rounding to nearest even"},
    {"to_f32", (PyCFunction)(void (*)(void))py_to_f32, METH_FASTCALL, "to_f32(x, out[, portable]): float16 bits to float32"},
    {"plain", (PyCFunction)(void (*)(void))py_plain, METH_FASTCALL, "plain(fn): the kernel k(ctx, *a, **kw) = fn(*a, **kw)"},
    {"quiet", (PyCFunction)(void (*)(void))py_quiet, METH_FASTCALL,
     "quiet(fn, generic, halves, half_set, var, ignore): fn(*inputs) with floating-point warnings off"},
    {"astype", (PyCFunction)(void (*)(void))py_astype, METH_FASTCALL,
     "astype(generic, empty, ndarray, float16, float32): the astype kernel, float32 <-> float16 in C"},
    {"where", (PyCFunction)(void (*)(void))py_where, METH_FASTCALL,
     "where(generic, empty, ndarray): the where kernel, a bool condition over two same-shape arrays in C"},
    {"concat", (PyCFunction)(void (*)(void))py_concat, METH_FASTCALL,
     "concat(generic, empty, ndarray): the concat kernel, C-contiguous arrays of one dtype joined in C"},
    {"extreme", (PyCFunction)(void (*)(void))py_extreme, METH_FASTCALL,
     "extreme(op, generic, empty, ndarray): the max (1) or min (2) kernel of float32/float64 arrays"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Fused float32 kernels of the cpu backend.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&WrapperType) < 0) return NULL;
    s_dtype = PyUnicode_InternFromString("dtype");
    s_np = PyUnicode_InternFromString("_np");
    s_shape = PyUnicode_InternFromString("shape");
    if (s_dtype == NULL || s_np == NULL || s_shape == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "Kernel", (PyObject *)&WrapperType) < 0) Py_CLEAR(m);
    return m;
}
