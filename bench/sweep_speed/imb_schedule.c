/* What an IMB-MPI1 user gets, as a yardstick for ncclprobe's default sweep: MPI_Allreduce on
 * floats over sizes MIN..MAX (doubling), scheduled as IMB-MPI1 2021 schedules it with its
 * defaults (src_c/IMB_settings.h, IMB_mem_manager.c: IMB_init_buffers_iter, IMB_allreduce.c):
 *
 *   repetitions n = min(MSGSPERSAMPLE = 1000, max(1, OVERALL_VOL = 40 MiB / size));
 *   iteration policy "dynamic": one call, then min(n, calls for ~1 s) calls, both timed,
 *     to cap a size at SECS_PER_SAMPLE = 10 s (they are run, so they count in the wall time);
 *   before the first size, N_WARMUP = 2 untimed calls;
 *   N_BARR = 2 barriers, then n calls, each timed alone and followed by a barrier (-sync 1);
 *   one sample per size, no interval; the time printed is the slowest rank's mean per call.
 *
 * Prints "size_bytes repetitions time_us" per size, then "wall_s S" (from MPI_Init's return
 * to the last size). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MSGSPERSAMPLE 1000
#define OVERALL_VOL (40.0 * 1048576)
#define SECS_PER_SAMPLE 10.0
#define N_WARMUP 2
#define N_BARR 2

static double run(const float *send, float *recv, int count, int n, int sync) {
  double t = 0;
  for (int b = 0; b < N_BARR; b++) MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < n; i++) {
    t -= MPI_Wtime();
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t += MPI_Wtime();
    if (sync) MPI_Barrier(MPI_COMM_WORLD);
  }
  double slowest;
  t /= n;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  double start = MPI_Wtime();
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t minb = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t maxb = argc > 2 ? strtoull(argv[2], NULL, 10) : 256u << 20;
  float *send = malloc(maxb), *recv = malloc(maxb);
  if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
  int prev_n = MSGSPERSAMPLE;
  for (size_t size = minb; size <= maxb; size *= 2) {
    int count = (int)(size / sizeof(float));
    /* IMB sets the buffers for every size (IMB_set_buf), so it is part of the wall time. */
    for (int i = 0; i < count; i++) {
      send[i] = 0.1f * (rank + 1) + (float)i;
      recv[i] = 0.0f;
    }
    double vol = OVERALL_VOL / (double)size;
    int n = vol >= MSGSPERSAMPLE ? MSGSPERSAMPLE : (vol < 1 ? 1 : (int)vol);
    if (size == minb) run(send, recv, count, N_WARMUP, 0);
    /* The dynamic iteration policy: a single call, then a calibration run. */
    double t1 = run(send, recv, count, 1, 1);
    int rep = t1 < 1.0 / MSGSPERSAMPLE ? MSGSPERSAMPLE : (t1 < 1.0 ? (int)(1.0 / t1 + 0.5) : 1);
    int calib = n < rep ? n : rep;
    double t = calib > 1 ? run(send, recv, count, calib, 1) : t1;
    int cap = t > 1e-8 ? (int)(1 + SECS_PER_SAMPLE / t) : n;
    if (cap < n) n = cap;
    if (prev_n < n) n = prev_n;
    prev_n = n;
    double per_call = run(send, recv, count, n, 1);
    if (rank == 0) printf("%zu %d %.4f\n", size, n, per_call * 1e6);
  }
  if (rank == 0) printf("wall_s %.4f\n", MPI_Wtime() - start);
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
