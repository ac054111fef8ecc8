/* Real kernels timed by simhpc's microbenchmarks (validation/microbench).
 *
 * Built by native.py with: gcc -O3 -march=native -ffast-math -fopenmp -fPIC -shared.
 * Every timed function runs its kernel `reps` times and returns the elapsed wall time in
 * seconds, measured here with CLOCK_MONOTONIC so that the ctypes call overhead is excluded.
 * Threaded kernels use OpenMP with an explicit thread count; like most runtimes (PyTorch's
 * grain size is 32768 elements) they run arrays smaller than GRAIN on one thread.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#define GRAIN 32768L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Loops run on `threads` threads when the array reaches GRAIN elements, else inline. */
#define PARALLEL(n, threads) ((threads) > 1 && (n) >= GRAIN)

/* ---- elementwise maps: c = f(a, b) -------------------------------------------------- */

#define EW(NAME, T, EXPR)                                                                   \
    double NAME(const T *restrict a, const T *restrict b, T *restrict c, long n, int reps,  \
                int threads) {                                                              \
        double t0 = now();                                                                  \
        for (int r = 0; r < reps; r++) {                                                    \
            if (PARALLEL(n, threads)) {                                                     \
                _Pragma("omp parallel for simd num_threads(threads) schedule(static)")      \
                for (long i = 0; i < n; i++) { T x = a[i], y = b[i]; (void)y; c[i] = EXPR; } \
            } else {                                                                        \
                _Pragma("omp simd")                                                         \
                for (long i = 0; i < n; i++) { T x = a[i], y = b[i]; (void)y; c[i] = EXPR; } \
            }                                                                               \
        }                                                                                   \
        return now() - t0;                                                                  \
    }

EW(ew_add_f32, float, x + y)
EW(ew_mul_f32, float, x * y)
EW(ew_tanh_f32, float, tanhf(x))
EW(ew_exp_f32, float, expf(x))
EW(ew_gelu_f32, float, 0.5f * x * (1.0f + erff(x * 0.70710678f)))
EW(ew_add_f64, double, x + y)
EW(ew_mul_f64, double, x * y)
EW(ew_tanh_f64, double, tanh(x))
EW(ew_exp_f64, double, exp(x))
EW(ew_gelu_f64, double, 0.5 * x * (1.0 + erf(x * 0.7071067811865476)))

/* ---- reductions -------------------------------------------------------------------- */

#define RED_SUM(NAME, T)                                                                    \
    double NAME(const T *restrict a, long n, int reps, int threads, double *result) {      \
        double t0 = now(), total = 0;                                                       \
        for (int r = 0; r < reps; r++) {                                                    \
            T s = 0;                                                                        \
            if (PARALLEL(n, threads)) {                                                     \
                _Pragma("omp parallel for simd num_threads(threads) reduction(+:s)")        \
                for (long i = 0; i < n; i++) s += a[i];                                     \
            } else {                                                                        \
                _Pragma("omp simd reduction(+:s)")                                          \
                for (long i = 0; i < n; i++) s += a[i];                                     \
            }                                                                               \
            total += (double)s;                                                             \
        }                                                                                   \
        double dt = now() - t0;                                                             \
        *result = total;                                                                    \
        return dt;                                                                          \
    }

#define RED_MAX(NAME, T)                                                                    \
    double NAME(const T *restrict a, long n, int reps, int threads, double *result) {      \
        double t0 = now(), total = 0;                                                       \
        for (int r = 0; r < reps; r++) {                                                    \
            T m = a[0];                                                                     \
            if (PARALLEL(n, threads)) {                                                     \
                _Pragma("omp parallel for simd num_threads(threads) reduction(max:m)")      \
                for (long i = 0; i < n; i++) m = a[i] > m ? a[i] : m;                       \
            } else {                                                                        \
                _Pragma("omp simd reduction(max:m)")                                        \
                for (long i = 0; i < n; i++) m = a[i] > m ? a[i] : m;                       \
            }                                                                               \
            total += (double)m;                                                             \
        }                                                                                   \
        double dt = now() - t0;                                                             \
        *result = total;                                                                    \
        return dt;                                                                          \
    }

RED_SUM(red_sum_f32, float)
RED_SUM(red_sum_f64, double)
RED_MAX(red_max_f32, float)
RED_MAX(red_max_f64, double)

/* ---- memory bandwidth (STREAM-style, double) -------------------------------------- */

double bw_copy(const double *restrict a, double *restrict b, long n, int reps, int threads) {
    double t0 = now();
    for (int r = 0; r < reps; r++) {
        if (PARALLEL(n, threads)) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
            for (long i = 0; i < n; i++) b[i] = a[i];
        } else {
#pragma omp simd
            for (long i = 0; i < n; i++) b[i] = a[i];
        }
    }
    return now() - t0;
}

double bw_triad(double *restrict a, const double *restrict b, const double *restrict c, long n,
                int reps, int threads) {
    double t0 = now();
    for (int r = 0; r < reps; r++) {
        if (PARALLEL(n, threads)) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
            for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        } else {
#pragma omp simd
            for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        }
    }
    return now() - t0;
}

/* ---- rewrite: stores into lines written before ------------------------------------- */

/* Store into every float of c once (one thread: where written lines stay does not depend on how
 * many threads wrote them). */
double store_lines(float *restrict c, long n) {
    double t0 = now();
#pragma omp simd
    for (long i = 0; i < n; i++) c[i] = (float)i;
    return now() - t0;
}

/* ---- pointer chase: latency of dependent loads, one per 64-byte line --------------- */

typedef struct line { struct line *next; char pad[64 - sizeof(void *)]; } line_t;

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Chase a random cyclic permutation (Sattolo) of `nbytes / 64` lines; returns seconds per load.
 * The buffer is 2 MiB aligned and advised for transparent huge pages, so that the curve shows
 * cache and DRAM latency rather than page walks. */
double chase_latency(long nbytes, long steps, uint64_t seed) {
    long n = nbytes / (long)sizeof(line_t);
    if (n < 2) return -1.0;
    size_t size = ((size_t)n * sizeof(line_t) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    line_t *lines = aligned_alloc(2u << 20, size);
    if (!lines) return -1.0;
    madvise(lines, size, MADV_HUGEPAGE);
    long *order = malloc((size_t)n * sizeof(long));
    if (!order) { free(lines); return -1.0; }
    for (long i = 0; i < n; i++) order[i] = i;
    uint64_t s = seed | 1;
    for (long i = n - 1; i > 0; i--) {  /* Sattolo: one cycle through all lines */
        long j = (long)(xorshift(&s) % (uint64_t)i);
        long t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (long i = 0; i < n; i++) lines[order[i]].next = &lines[order[(i + 1) % n]];
    free(order);
    line_t *p = &lines[0];
    long lap = n < steps ? n : steps;
    for (long i = 0; i < lap; i++) p = p->next;  /* warm-up: a lap, at most `steps` loads */
    double t0 = now();
    for (long i = 0; i < steps; i++) p = p->next;
    double dt = now() - t0;
    void *volatile sink = p;
    (void)sink;
    free(lines);
    return dt / (double)steps;
}

/* chase_latency on a thread bound to CPU `cpu` (the L1 probe of another core than the caller's):
 * -1 when the thread could not be started or bound. */
struct chase_job { int cpu; long nbytes; long steps; uint64_t seed; double result; };

static void *chase_bound(void *arg) {
    struct chase_job *job = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(job->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0)
        job->result = chase_latency(job->nbytes, job->steps, job->seed);
    return NULL;
}

double chase_latency_on(int cpu, long nbytes, long steps, uint64_t seed) {
    struct chase_job job = {cpu, nbytes, steps, seed, -1.0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, chase_bound, &job) != 0) return -1.0;
    pthread_join(thread, NULL);
    return job.result;
}

/* ---- core clock and FMA throughput ------------------------------------------------- */

/* A chain of dependent integer adds retires one per cycle. Timed in `chunks` short chunks of
 * `iters` x 16 adds; returns the fastest chunk's cycles per second, so that a neighbour taking
 * the core for some chunks does not lower the figure. The addend is a register the compiler
 * cannot see into: Intel cores since Golden Cove fold chains of adds of an immediate at rename
 * (5-6 a cycle; the immediate form read 19 GHz on a 3.6 GHz Xeon). */
double clock_probe(long iters, int chunks) {
    uint64_t x = 0, one = 1;
    __asm__ volatile("" : "+r"(one));
    double best = 0.0;
    for (int c = 0; c < chunks; c++) {
        double t0 = now();
        for (long i = 0; i < iters; i++) {
#define STEP x += one; __asm__ volatile("" : "+r"(x));
            STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP
#undef STEP
        }
        double rate = 16.0 * (double)iters / (now() - t0);
        if (rate > best) best = rate;
    }
    volatile uint64_t sink = x;
    (void)sink;
    return best;
}

/* ---- round trip of a cache line between two cores ---------------------------------- */

/* Two threads hand a counter back and forth through one cache line `trips` times (this one writes
 * odd values, a thread started for the purpose answers with the next even one): this thread's
 * elapsed seconds, or -1 when the second thread could not be started. What a fork, a barrier or a
 * shared queue costs per hand-over between the cores the OS put the threads on. A plain pthread,
 * joined at the end, not an OpenMP team: an OpenMP runtime's idle worker spins on after the region
 * (about 10 ms of CPU here), and the multi-thread point measured right after the probe shared a
 * core with it (on 2 vCPUs its calls then waited for 4 ms scheduler ticks). */
struct peer { _Atomic long *flag; long trips; };

enum { PEER_WARMUP = 1000 };  /* untimed trips first: the second thread settles on its core */

static void *peer_answer(void *arg) {
    struct peer *peer = arg;
    for (long i = 0; i < PEER_WARMUP + peer->trips; i++) {
        while (atomic_load_explicit(peer->flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(peer->flag, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

double peer_round_trip(long trips) {
    static _Atomic long flag __attribute__((aligned(64)));
    struct peer peer = {&flag, trips};
    pthread_t other;
    atomic_store(&flag, 0);
    if (pthread_create(&other, NULL, peer_answer, &peer) != 0) return -1.0;
    double t0 = 0.0;
    for (long i = 0; i < PEER_WARMUP + trips; i++) {
        if (i == PEER_WARMUP) t0 = now();
        atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
        }
    }
    double elapsed = now() - t0;
    pthread_join(other, NULL);
    return elapsed;
}

#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
typedef float vfloat __attribute__((vector_size(VBYTES)));
#define NACC 12

/* Independent vector FMA chains on one core (12 accumulators in registers, more than FMA
 * latency x pipes on current cores), timed in `chunks` chunks of `iters` iterations: returns the
 * fastest chunk's single-precision FLOP/s. */
double fma_probe(long iters, int chunks, int *vector_bytes) {
    vfloat m, a;
    for (int j = 0; j < VBYTES / 4; j++) { m[j] = 0.999f; a[j] = 0.001f; }
    vfloat c0 = a, c1 = a * 2, c2 = a * 3, c3 = a * 4, c4 = a * 5, c5 = a * 6;
    vfloat c6 = a * 7, c7 = a * 8, c8 = a * 9, c9 = a * 10, c10 = a * 11, c11 = a * 12;
    double best = 0.0;
    for (int c = 0; c < chunks; c++) {
        double t0 = now();
        for (long i = 0; i < iters; i++) {
            c0 = c0 * m + a; c1 = c1 * m + a; c2 = c2 * m + a; c3 = c3 * m + a;
            c4 = c4 * m + a; c5 = c5 * m + a; c6 = c6 * m + a; c7 = c7 * m + a;
            c8 = c8 * m + a; c9 = c9 * m + a; c10 = c10 * m + a; c11 = c11 * m + a;
        }
        double rate = 2.0 * NACC * (VBYTES / 4) * (double)iters / (now() - t0);
        if (rate > best) best = rate;
    }
    vfloat s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
    volatile float sink = s[0];
    (void)sink;
    *vector_bytes = VBYTES;
    return best;
}

/* ---- 7-point 3-D stencil over 16^3-cell AMR blocks (one ghost layer: 18^3 storage) -- */

#define BS 16
#define BG (BS + 2)
#define AT(b, i, j, k) ((b) + ((long)(i) * BG + (j)) * BG + (k))

double stencil7(const double *restrict in, double *restrict out, long blocks, int reps,
                int threads) {
    const long stride = (long)BG * BG * BG;
    const double c0 = -6.0, c1 = 1.0;
    double t0 = now();
    for (int r = 0; r < reps; r++) {
#pragma omp parallel for num_threads(threads) if (blocks > 1) schedule(static)
        for (long b = 0; b < blocks; b++) {
            const double *u = in + b * stride;
            double *v = out + b * stride;
            for (int i = 1; i <= BS; i++)
                for (int j = 1; j <= BS; j++)
#pragma omp simd
                    for (int k = 1; k <= BS; k++)
                        *AT(v, i, j, k) = c0 * *AT(u, i, j, k)
                            + c1 * (*AT(u, i - 1, j, k) + *AT(u, i + 1, j, k)
                                    + *AT(u, i, j - 1, k) + *AT(u, i, j + 1, k)
                                    + *AT(u, i, j, k - 1) + *AT(u, i, j, k + 1));
        }
    }
    return now() - t0;
}

/* ---- hash-table probes ------------------------------------------------------------- */
/* Baseline: open addressing with linear probing over 64-bit keys (0 = empty), filled to
 * `load` of its slots; lookups of random keys, `hit_fraction` of them present.
 * The kvstore issue adds its AVX-512 bucketed three-hash table beside this one (same
 * signature: table_slots, load, hit_fraction, probes, seed, &lines_per_probe). */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

double hash_probe_linear(long slots, double load, double hit_fraction, long probes, uint64_t seed,
                         double *lines_per_probe) {
    if (slots < 16 || (slots & (slots - 1))) return -1.0;  /* power of two */
    uint64_t *table = aligned_alloc(64, (size_t)slots * sizeof(uint64_t));
    if (!table) return -1.0;
    memset(table, 0, (size_t)slots * sizeof(uint64_t));
    const uint64_t mask = (uint64_t)slots - 1;
    long keys = (long)(load * (double)slots);
    /* Present keys are 2i+2 (even), absent ones are odd: hits and misses are known. */
    for (long i = 0; i < keys; i++) {
        uint64_t key = 2 * (uint64_t)i + 2, h = mix64(key) & mask;
        while (table[h]) h = (h + 1) & mask;
        table[h] = key;
    }
    uint64_t s = seed | 1, found = 0, scanned = 0;
    double t0 = now();
    for (long p = 0; p < probes; p++) {
        uint64_t r = xorshift(&s);
        uint64_t key = ((double)(r >> 11) * 0x1.0p-53 < hit_fraction)
                           ? 2 * (r % (uint64_t)(keys ? keys : 1)) + 2
                           : 2 * r + 1;
        uint64_t h = mix64(key) & mask, first = h;
        while (table[h] && table[h] != key) h = (h + 1) & mask;
        found += table[h] == key;
        scanned += 1 + (((h - first) & mask) * sizeof(uint64_t) + (first * sizeof(uint64_t)) % 64) / 64;
    }
    double dt = now() - t0;
    volatile uint64_t sink = found;
    (void)sink;
    *lines_per_probe = (double)scanned / (double)probes;
    free(table);
    return dt;
}
