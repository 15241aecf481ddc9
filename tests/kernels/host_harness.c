/* Host harness for the kernel math in the .cuh files of kernels/.

   Built by tests/kernels/test_host_build.py with gcc, once with -DHT_DOUBLE=0
   (float) and once with -DHT_DOUBLE=1 (double); the CUDA qualifiers are
   defined away below. Usage:

       host_harness KERNEL N DIR

   reads DIR/scalars.bin (float64 values, in the order the kernel function
   takes them) and the input arrays DIR/<name>.bin (N values each, in the
   build's type), runs the kernel's __device__ function over every element,
   and writes the arrays it updates or produces to DIR/<name>.out.bin. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __device__
#define __forceinline__ static inline

#include "real.cuh"
#include "multi_tensor.cuh"
#include "adamw.cuh"
#include "sgd.cuh"
#include "scaled_sigmoid.cuh"
#include "scale.cuh"

static const char *dir;
static long n;

static void *load(const char *name, size_t count, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "host_harness: cannot open %s\n", path);
        exit(2);
    }
    void *data = malloc(count * size + 1);
    if (fread(data, size, count, f) != count) {
        fprintf(stderr, "host_harness: %s holds fewer than %zu values\n", path, count);
        exit(2);
    }
    fclose(f);
    return data;
}

static void save(const char *name, const void *data, size_t count, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.out.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, size, count, f) != count || fclose(f) != 0) {
        fprintf(stderr, "host_harness: cannot write %s\n", path);
        exit(2);
    }
}

static HT_REAL *input(const char *name) { return load(name, n, sizeof(HT_REAL)); }

static void output(const char *name, const HT_REAL *values) { save(name, values, n, sizeof(HT_REAL)); }

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: host_harness KERNEL N DIR\n");
        return 2;
    }
    const char *kernel = argv[1];
    n = atol(argv[2]);
    dir = argv[3];

    if (strcmp(kernel, "adamw") == 0) {
        const double *s = load("scalars", 9, sizeof(double));
        HT_REAL *param = input("param"), *grad = input("grad"), *exp_avg = input("exp_avg");
        HT_REAL *exp_avg_sq = input("exp_avg_sq"), *max_exp_avg_sq = input("max_exp_avg_sq");
        for (long i = 0; i < n; ++i) {
            HT_FN(ht_adamw_step)(&param[i], grad[i], &exp_avg[i], &exp_avg_sq[i],
                                 &max_exp_avg_sq[i], (HT_REAL)s[0], (HT_REAL)s[1],
                                 (HT_REAL)s[2], (HT_REAL)s[3], (HT_REAL)s[4], (HT_REAL)s[5],
                                 (HT_REAL)s[6], (int)s[7], (int)s[8]);
        }
        output("param", param);
        output("exp_avg", exp_avg);
        output("exp_avg_sq", exp_avg_sq);
        output("max_exp_avg_sq", max_exp_avg_sq);
    } else if (strcmp(kernel, "sgd") == 0) {
        const double *s = load("scalars", 7, sizeof(double));
        HT_REAL *param = input("param"), *grad = input("grad");
        HT_REAL *momentum_buffer = input("momentum_buffer");
        for (long i = 0; i < n; ++i) {
            HT_FN(ht_sgd_step)(&param[i], grad[i], &momentum_buffer[i], (HT_REAL)s[0],
                               (HT_REAL)s[1], (HT_REAL)s[2], (HT_REAL)s[3], (int)s[4],
                               (int)s[5], (int)s[6]);
        }
        output("param", param);
        output("momentum_buffer", momentum_buffer);
    } else if (strcmp(kernel, "scaled_sigmoid") == 0) {
        const double *s = load("scalars", 1, sizeof(double));
        HT_REAL *x = input("x");
        for (long i = 0; i < n; ++i) {
            x[i] = HT_FN(ht_scaled_sigmoid)(x[i], (HT_REAL)s[0]);
        }
        output("y", x);
    } else if (strcmp(kernel, "scaled_sigmoid_grad") == 0) {
        const double *s = load("scalars", 1, sizeof(double));
        HT_REAL *x = input("x"), *grad_out = input("grad_out");
        for (long i = 0; i < n; ++i) {
            x[i] = HT_FN(ht_scaled_sigmoid_grad)(x[i], grad_out[i], (HT_REAL)s[0]);
        }
        output("grad_x", x);
    } else if (strcmp(kernel, "scale") == 0) {
        const double *s = load("scalars", 1, sizeof(double));
        HT_REAL *values = input("values");
        for (long i = 0; i < n; ++i) {
            HT_FN(ht_scale)(&values[i], (HT_REAL)s[0]);
        }
        output("values", values);
    } else if (strcmp(kernel, "chunk_tensor") == 0) {
        /* N is the launch's length, padding included; scalars.bin holds chunk_shift and the
           numbers of tensors and chunks. Writes each index's tensor, or -1 for padding. */
        const double *s = load("scalars", 3, sizeof(double));
        const int chunk_shift = (int)s[0];
        const size_t n_tensors = (size_t)s[1], n_chunks = (size_t)s[2];
        const long long *starts = load("starts", n_tensors, sizeof(long long));
        const long long *sizes = load("sizes", n_tensors, sizeof(long long));
        const long long *chunks = load("chunks", n_chunks, sizeof(long long));
        long long *tensor = malloc((size_t)n * sizeof(long long) + 1);
        for (long i = 0; i < n; ++i) {
            long long k;
            const long long t = ht_chunk_tensor(chunks, chunk_shift, starts, i, &k);
            tensor[i] = k < sizes[t] ? t : -1;
        }
        save("tensor", tensor, n, sizeof(long long));
    } else {
        fprintf(stderr, "host_harness: unknown kernel %s\n", kernel);
        return 2;
    }
    return 0;
}
