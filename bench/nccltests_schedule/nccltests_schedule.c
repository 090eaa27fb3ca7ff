/* nccl-tests 2.19.6's all_reduce_perf schedule, emulated over MPI: MPI_Allreduce (float, sum)
 * on host buffers, one rank per process, each step in the order src/common.cu takes it, so
 * that its wall time is what nccl-tests' own schedule costs on this MPI. The yardstick for
 * ncclprobe called as all_reduce_perf (bench/nccltests_schedule/run).
 *
 *   mpirun -np 2 nccltests_schedule [-b minbytes] [-e maxbytes] [-i stepbytes] [-f stepfactor]
 *                                   [-n iters] [-w warmup_iters] [-c check_iters] [-a average]
 *
 * Flags, sizes and defaults as nccl-tests' main() reads them (-b/-e 32M, -i 1M, -f 1, -n 20,
 * -w 1, -c 1, -a 1; K/M/G suffixes as parsesize()). What the GPU does is done on the host:
 * ncclAllReduce is MPI_Allreduce (in place: MPI_IN_PLACE, since MPI forbids aliased buffers),
 * cudaMalloc is malloc with every page touched, the verifiable kernels of InitData and
 * CheckDelta are loops over small-integer floats whose sums are exact. One thread, one "GPU"
 * per process (-t 1 -g 1), blocking_coll 0, no -m/-G/-I/-u/-R: the defaults, under which
 * completeColl() has nothing to wait for, since MPI_Allreduce returns with the result.
 *
 * Prints, on rank 0, per size: size_bytes count oop_time_us oop_wrong ip_time_us ip_wrong
 * (the times as nccl-tests reports them: average over ranks of the timed batch's time per
 * call; wrong is N/A without -c), then the footer and the process's wall time in seconds. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Globals with main()'s defaults (common.cu 90-120). */
static size_t minBytes = 32 * 1024 * 1024, maxBytes = 32 * 1024 * 1024;
static size_t stepBytes = 1 * 1024 * 1024, stepFactor = 1;
static int datacheck = 1, warmup_iters = 1, iters = 20, average = 1;

struct args {
  int proc, nProcs;            /* this rank, ranks (one thread, one GPU each) */
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  size_t nbytes, sendBytes, expectedBytes; /* setupArgs() */
  char *sendbuff, *recvbuff;
  float *expected;
  int errors;
  double bw;
  int bw_count;
};

/* timer.cc: std::chrono::steady_clock, in seconds. */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* parsesize(), common.cu 227-262: "%lf %1s", then K/M/G (binary). */
static double parsesize(const char *value) {
  double size;
  char lit[2];
  long long units;
  int count = sscanf(value, "%lf %1s", &size, lit);
  if (count == 2) {
    switch (lit[0]) {
    case 'G': case 'g': units = 1024LL * 1024 * 1024; break;
    case 'M': case 'm': units = 1024 * 1024; break;
    case 'K': case 'k': units = 1024; break;
    default: return -1.0;
    }
  } else if (count == 1) {
    units = 1;
  } else {
    return -1.0;
  }
  return size * units;
}

/* Barrier(), common.cu 279-304: with one thread per process, only its MPI_Barrier. */
static void Barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

/* Allreduce<double>(args, value, average), common.cu 309-365, one thread per process: 0 keeps
 * rank 0's own value unreduced (nccl-tests' "dubious" r0 mode reduces nothing across
 * processes), 1 sums and divides by totalProcs, 2 min, 3 max, 4 sum. */
static void AllreduceD(struct args *a, double *value, int avg) {
  if (avg != 0) {
    MPI_Op op = avg == 2 ? MPI_MIN : avg == 3 ? MPI_MAX : MPI_SUM;
    MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  }
  if (avg == 1) *value /= a->nProcs;
}
static void AllreduceLL(long long *value) { /* Allreduce<long long>(..., sum=4) */
  MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
}

/* setupArgs(), common.cu 900-912, with AllReduceGetCollByteCount (all_reduce.cu): send,
 * receive and parameter counts are all `count`, in-place offsets 0. */
static void setupArgs(size_t size, struct args *a) {
  size_t count = size / sizeof(float);
  a->nbytes = a->sendBytes = a->expectedBytes = count * sizeof(float);
}

/* The verifiable input of rank r for seed `seed` at element i: small integers, so that the
 * sum over ranks is exact in float (the role of ncclVerifiablePrepareInput/Expected). */
static inline float input(size_t i, int r, int seed) {
  return (float)((i + (size_t)seed * 7 + (size_t)r * 13) & 63);
}

/* AllReduceInitData (all_reduce.cu): zero the receive buffer, write this rank's input (into
 * the receive buffer in place), the expected sum into `expected`; seed `rep`. */
static void InitData(struct args *a, int rep, int in_place) {
  size_t sendcount = a->sendBytes / sizeof(float), recvcount = a->expectedBytes / sizeof(float);
  memset(a->recvbuff, 0, a->expectedBytes);
  float *data = (float *)(in_place ? a->recvbuff : a->sendbuff);
  for (size_t i = 0; i < sendcount; i++) data[i] = input(i, a->proc, rep);
  for (size_t i = 0; i < recvcount; i++) {
    float s = 0;
    for (int r = 0; r < a->nProcs; r++) s += input(i, r, rep);
    a->expected[i] = s;
  }
}

/* CheckData(), common.cu 435-480 (CheckDelta on the receive buffer, offset recvInplaceOffset *
 * rank = 0 for all-reduce); reportErrors = datacheck, so a wrong element counts an error. */
static long long CheckData(struct args *a, int in_place) {
  (void)in_place;
  size_t count = a->expectedBytes / sizeof(float);
  const float *data = (const float *)a->recvbuff;
  long long wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += data[i] != a->expected[i];
  if (datacheck && wrong) a->errors++;
  return wrong;
}

/* startColl(), common.cu 540-627: the call for iteration `iter` moves through the buffers
 * ("to avoid cache effects"): shift = totalnbytes * (iter % (maxbytes / totalnbytes)). In
 * place, the input is the receive buffer (runColl(recvBuff, ..., recvBuff, ...)). With
 * blocking_coll 0 there is no stream synchronize and no Barrier after the call. */
static void startColl(struct args *a, int in_place, int iter) {
  size_t count = a->nbytes / sizeof(float);
  size_t totalnbytes = a->sendBytes > a->expectedBytes ? a->sendBytes : a->expectedBytes;
  size_t steps = totalnbytes ? a->maxbytes / totalnbytes : 1;
  size_t shift = totalnbytes * (iter % steps);
  char *recvBuff = a->recvbuff + shift, *sendBuff = a->sendbuff + shift;
  MPI_Allreduce(in_place ? MPI_IN_PLACE : sendBuff, recvBuff, (int)count, MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
}

/* completeColl(), common.cu 629-634: testStreamSynchronize. MPI_Allreduce is blocking, so
 * the "stream" is always idle here. */
static void completeColl(struct args *a) { (void)a; }

/* BenchTime(), common.cu 694-898, with -t 1 -g 1, no -G, no -I, blocking_coll 0, agg_iters
 * 1, report_cputime 0. Returns the reported time per call in microseconds. */
static double BenchTime(struct args *a, int in_place, long long *wrongOut) {
  size_t count = a->nbytes / sizeof(float);
  /* 696-699: with -c, initialise send, receive and expected (seed 99). */
  if (datacheck) InitData(a, 99, in_place);

  /* 701-705 "Sync": one untimed call, then the barrier. */
  startColl(a, in_place, 0);
  completeColl(a);
  Barrier();

  /* 728-743: the timer starts before the loop of -n calls (iter = 0 .. iters-1, each at its
   * shift); 769-772: the time is read after completeColl, divided by iters*agg_iters. */
  double t0 = now_s();
  for (int iter = 0; iter < iters; iter++) startColl(a, in_place, iter);
  completeColl(a);
  double deltaSec = (now_s() - t0) / iters;

  /* 783: the time across ranks (-a: 1 = average, the default). */
  AllreduceD(a, &deltaSec, average);

  /* 796-798: bandwidths (AllReduceGetBw), then the barrier. */
  double algBw = (double)(count * sizeof(float)) / 1.0E9 / deltaSec;
  double busBw = algBw * (2.0 * (a->nProcs - 1)) / a->nProcs;
  Barrier();

  /* 800-850: -c checks after the timing, each on freshly initialised data (seed rep, which
   * counts BenchTime's calls), one call at iteration 0, the check, the wrong elements summed
   * across ranks; stop at the first check that finds any. */
  static int rep = 0;
  rep++;
  long long wrongElts = 0;
  for (int c = 0; c < datacheck; c++) {
    InitData(a, rep, in_place);
    startColl(a, in_place, 0);
    completeColl(a);
    long long wrong1 = CheckData(a, in_place);
    AllreduceLL(&wrong1);
    wrongElts = wrong1;
    if (wrongElts) break;
  }
  *wrongOut = wrongElts;

  /* 895-896 */
  a->bw += busBw;
  a->bw_count++;
  return deltaSec * 1.0E6; /* 858: timeUsec = deltaSec*1.0E6 */
}

/* TimeTest(), common.cu 914-951 (the test body AllReduceRunTest runs for -d float -o sum). */
static void TimeTest(struct args *a) {
  /* 916: "Sync to avoid first-call timeout". */
  Barrier();

  /* 924-931: warm-up for all sizes, min to max doubling whatever -f says, -w out-of-place
   * calls each (iter = 0 .. w-1, each at its shift), completeColl after each size. */
  for (size_t size = a->minbytes; size <= a->maxbytes; size = size * 2) {
    setupArgs(size, a);
    for (int iter = 0; iter < warmup_iters; iter++) startColl(a, 0, iter);
    completeColl(a);
    if (size == 0) break; /* 0 * 2 would loop forever; nccl-tests has the same loop */
  }

  /* 933-943: per size, out of place then in place (-N 1: one cycle). */
  for (size_t size = a->minbytes; size <= a->maxbytes;
       size = a->stepfactor > 1 ? size * a->stepfactor : size + a->stepbytes) {
    setupArgs(size, a);
    long long wo, wi;
    double oop = BenchTime(a, 0, &wo);
    double ip = BenchTime(a, 1, &wi);
    if (a->proc == 0) {
      char so[24] = "N/A", si[24] = "N/A";
      if (datacheck) {
        snprintf(so, sizeof so, "%lld", wo);
        snprintf(si, sizeof si, "%lld", wi);
      }
      printf("%12zu %12zu %12.2f %6s %12.2f %6s\n", size, a->nbytes / sizeof(float), oop, so,
             ip, si);
      fflush(stdout);
    }
  }
}

int main(int argc, char **argv) {
  double wall0 = now_s();
  /* main(), common.cu 1120-1437: the flags this emulation honours. */
  int c;
  double parsed;
  while ((c = getopt(argc, argv, "b:e:i:f:n:w:c:a:")) != -1) {
    switch (c) {
    case 'b':
      if ((parsed = parsesize(optarg)) < 0) {
        fprintf(stderr, "invalid size specified for 'minbytes'\n");
        return -1;
      }
      minBytes = (size_t)parsed;
      break;
    case 'e':
      if ((parsed = parsesize(optarg)) < 0) {
        fprintf(stderr, "invalid size specified for 'maxbytes'\n");
        return -1;
      }
      maxBytes = (size_t)parsed;
      break;
    case 'i':
      if ((parsed = parsesize(optarg)) < 0) {
        fprintf(stderr, "invalid size specified for 'stepBytes'\n");
        return -1;
      }
      stepBytes = (size_t)parsed;
      break;
    case 'f': stepFactor = strtol(optarg, NULL, 0); break;
    case 'n': iters = (int)strtol(optarg, NULL, 0); break;
    case 'w': warmup_iters = (int)strtol(optarg, NULL, 0); break;
    case 'c': datacheck = (int)strtol(optarg, NULL, 0); break;
    case 'a': average = (int)strtol(optarg, NULL, 0); break;
    default:
      fprintf(stderr, "usage: %s [-b minbytes] [-e maxbytes] [-i stepbytes] [-f stepfactor] "
                      "[-n iters] [-w warmup_iters] [-c check_iters] [-a average]\n", argv[0]);
      return 0;
    }
  }
  if (minBytes > maxBytes) { /* 1407-1412 */
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
            (unsigned long long)minBytes, (unsigned long long)maxBytes);
    return -1;
  }
  MPI_Init(&argc, &argv); /* 1439 */

  /* run(), common.cu 1479-1857. 1486-1490: rank, size, the all-gather of host hashes. */
  struct args a = {0};
  MPI_Comm_size(MPI_COMM_WORLD, &a.nProcs);
  MPI_Comm_rank(MPI_COMM_WORLD, &a.proc);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  uint64_t *hostHashs = calloc(a.nProcs, sizeof(uint64_t));
  for (const char *p = host; *p; p++) hostHashs[a.proc] = hostHashs[a.proc] * 31 + (uint8_t)*p;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hostHashs, sizeof(uint64_t), MPI_BYTE,
                MPI_COMM_WORLD);
  /* 1522-1525: the communicator for NCCL's ranks (no NCCL_TESTS_SPLIT: everyone, color 0). */
  MPI_Comm mpi_comm;
  MPI_Comm_split(MPI_COMM_WORLD, 0, a.proc, &mpi_comm);
  /* 1549-1555: rank 0's ncclUniqueId (128 bytes) broadcast, then a barrier. */
  char ncclId[128] = {0};
  MPI_Bcast(ncclId, sizeof ncclId, MPI_BYTE, 0, mpi_comm);
  MPI_Barrier(MPI_COMM_WORLD);
  /* 1582-1584: the minimum CUDA architecture across ranks (here a constant). */
  int minCudaArch = 900;
  MPI_Allreduce(MPI_IN_PLACE, &minCudaArch, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  /* 1636 AllocateBuffs(): send and receive of maxBytes, expected with -c. cudaMalloc'd memory
   * is resident, so every page is touched here (not with zeros: malloc + memset 0 may become
   * calloc, whose pages stay the kernel's shared zero page until written). */
  a.minbytes = minBytes;
  a.maxbytes = maxBytes;
  a.stepbytes = stepBytes;
  a.stepfactor = stepFactor;
  size_t alloc = maxBytes ? maxBytes : 1;
  a.sendbuff = malloc(alloc);
  a.recvbuff = malloc(alloc);
  a.expected = datacheck ? malloc(alloc) : NULL;
  if (!a.sendbuff || !a.recvbuff || (datacheck && !a.expected)) {
    fprintf(stderr, "out of memory allocating %zu bytes\n", alloc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(a.sendbuff, 0x3f, alloc); /* 0x3f3f3f3f: about 0.75f, a normal float */
  memset(a.recvbuff, 0x3f, alloc);
  if (a.expected) memset(a.expected, 0x3f, alloc);

  if (a.proc == 0)
    printf("#   size_bytes        count   oop_time_us  oop_wrong  ip_time_us ip_wrong\n");

  /* 1723-1777: the header, then threadRunTests -> AllReduceRunTest -> TimeTest. */
  TimeTest(&a);

  /* 1785-1790: errors and the memory figures reduced across ranks. */
  int errors = a.errors;
  int64_t mem[3] = {0, 0, 0};
  MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < 3; i++)
    MPI_Allreduce(MPI_IN_PLACE, &mem[i], 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  free(a.sendbuff);
  free(a.recvbuff);
  free(a.expected);
  free(hostHashs);
  /* 1833: the footer (writeResultFooter); 1844-1845: MPI_Comm_free and MPI_Finalize. */
  if (a.proc == 0) {
    printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n", a.bw_count ? a.bw / a.bw_count : 0.0);
  }
  MPI_Comm_free(&mpi_comm);
  MPI_Finalize();
  if (a.proc == 0) printf("# wall_s %.3f\n", now_s() - wall0);
  return errors ? 7 : 0; /* testNumResults */
}
