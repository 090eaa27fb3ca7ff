/* The yardstick for ncclprobe's MPI harness: a bare MPI_Allreduce loop, timed the same way
 * (batches of iterations calibrated to ~2 ms, the slowest rank's time per sample, median over
 * samples), printing "size_bytes time_us" per size. A fourth argument "serialized" starts MPI
 * at MPI_THREAD_SERIALIZED, to show what a thread level above SINGLE costs; without it,
 * MPI_Init (MPI_THREAD_SINGLE), the level ncclprobe's mpi backend starts MPI at. */
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double batch(float *send, float *recv, size_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++)
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0, slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char **argv) {
  if (argc > 4 && strcmp(argv[4], "serialized") == 0) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t minb = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t maxb = argc > 2 ? strtoull(argv[2], NULL, 10) : 256u << 20;
  int samples = argc > 3 ? atoi(argv[3]) : 21;
  float *send = malloc(maxb), *recv = malloc(maxb);
  /* Real, non-zero inputs, as ncclprobe uses. Zeros would be unfair to the harness: the
   * compiler turns malloc + memset(0) into calloc, whose fresh pages all map the kernel's one
   * shared zero page until written, so the send buffer would be read from cache. */
  for (size_t i = 0; i < maxb / sizeof(float); i++) {
    send[i] = (float)(i % 251 + rank);
    recv[i] = -1.0f;
  }
  double *t = malloc(sizeof(double) * samples);
  for (size_t size = minb; size <= maxb; size *= 2) {
    size_t count = size / sizeof(float);
    double warm = batch(send, recv, count, 1);
    double per = warm;
    while (warm < 0.01) {
      int k = (int)ceil((0.01 - warm) / (per > 1e-9 ? per : 1e-9));
      double w = batch(send, recv, count, k);
      warm += w;
      per = w / k;
    }
    int iters = (int)ceil(0.002 / (per > 1e-9 ? per : 1e-9));
    if (iters < 1) iters = 1;
    for (int s = 0; s < samples; s++) t[s] = batch(send, recv, count, iters) / iters;
    qsort(t, samples, sizeof(double), cmp);
    if (rank == 0) printf("%zu %.4f\n", size, t[samples / 2] * 1e6);
  }
  MPI_Finalize();
  return 0;
}
