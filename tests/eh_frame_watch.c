// Logs every unmapping or free of memory that still holds a frame registered with libgcc's unwinder.
//
// XLA:CPU's JIT registers each compiled program's .eh_frame with __register_frame. If the program's memory is
// released without __deregister_frame, the unwinder's table points at freed memory and the next C++ exception,
// stack walk or thread exit segfaults, far from the cause. This library, preloaded, names the cause instead:
//
//   gcc -O2 -shared -fPIC -o /tmp/eh_frame_watch.so tests/eh_frame_watch.c -ldl -lpthread
//   EH_FRAME_WATCH_LOG=/tmp/frames.log LD_PRELOAD=/tmp/eh_frame_watch.so .venv/bin/python -m pytest ...
//
// Each event is a line (the range, the frame, the process's registered-frame count) and a backtrace
// (EH_FRAME_WATCH_NOBT=1 leaves it out: a backtrace walks the very table that may be broken). With
// EH_FRAME_WATCH_RUNNING set to make test's crash-log ".running" file, the running test's id is logged too.
// Every process ends with an "exit" line of its totals. How it found the suite's segfault: docs/installation.md.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_FRAMES 1000000
static uintptr_t frames[MAX_FRAMES];  // registered frame addresses, sorted (duplicates kept)
static int live, registered, deregistered, events;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static __thread int logging;

extern void __libc_free(void *);

static void *libgcc(const char *name) { return dlsym(dlopen("libgcc_s.so.1", RTLD_NOW), name); }

static int open_log(void) {
  if (log_fd < 0) {
    const char *path = getenv("EH_FRAME_WATCH_LOG");
    log_fd = open(path ? path : "/tmp/eh_frame_watch.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  return log_fd;
}

static void append_running_test(int fd) {
  const char *path = getenv("EH_FRAME_WATCH_RUNNING");
  int in = path ? open(path, O_RDONLY) : -1;
  if (in < 0) return;
  char text[512];
  ssize_t n = read(in, text, sizeof text);
  close(in);
  char *newline = n > 0 ? memchr(text, '\n', n) : NULL;
  if (n <= 0) return;
  dprintf(fd, "test: %.*s\n", (int)(newline ? newline - text : n), text);
}

static void report(const char *what, uintptr_t begin, uintptr_t end, uintptr_t frame) {
  int fd = open_log();
  dprintf(fd, "%s range=[%#lx,%#lx) frame=%#lx pid=%d tid=%d live=%d registered=%d deregistered=%d\n", what,
          begin, end, frame, getpid(), gettid(), live, registered, deregistered);
  append_running_test(fd);
  if (!getenv("EH_FRAME_WATCH_NOBT")) {
    void *trace[40];
    backtrace_symbols_fd(trace, backtrace(trace, 40), fd);
  }
  dprintf(fd, "----\n");
}

static int lower_bound(uintptr_t x) {
  int lo = 0, hi = live;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (frames[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static void check(const char *what, uintptr_t begin, uintptr_t end) {
  if (live == 0 || logging) return;
  pthread_mutex_lock(&lock);
  int i = lower_bound(begin);
  uintptr_t frame = i < live && frames[i] < end ? frames[i] : 0;
  if (frame) events++;
  pthread_mutex_unlock(&lock);
  if (!frame) return;
  logging = 1;
  report(what, begin, end, frame);
  logging = 0;
}

void __register_frame(void *begin) {
  static void (*real)(void *);
  if (!real) real = libgcc("__register_frame");
  pthread_mutex_lock(&lock);
  uintptr_t x = (uintptr_t)begin;
  int i = lower_bound(x);
  if (live < MAX_FRAMES) {
    memmove(&frames[i + 1], &frames[i], (live - i) * sizeof *frames);
    frames[i] = x;
    live++;
  }
  registered++;
  pthread_mutex_unlock(&lock);
  real(begin);
}

void __deregister_frame(void *begin) {
  static void (*real)(void *);
  if (!real) real = libgcc("__deregister_frame");
  pthread_mutex_lock(&lock);
  uintptr_t x = (uintptr_t)begin;
  int i = lower_bound(x);
  int known = i < live && frames[i] == x;
  if (known) {
    memmove(&frames[i], &frames[i + 1], (live - i - 1) * sizeof *frames);
    live--;
  }
  deregistered++;
  pthread_mutex_unlock(&lock);
  if (!known && !logging) {
    logging = 1;
    report("deregister of an unknown frame", x, x, x);
    logging = 0;
  }
  real(begin);
}

int munmap(void *addr, size_t length) {
  static int (*real)(void *, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "munmap");
  check("munmap over a registered frame", (uintptr_t)addr, (uintptr_t)addr + length);
  return real(addr, length);
}

void free(void *p) {
  if (p && live) check("free over a registered frame", (uintptr_t)p, (uintptr_t)p + malloc_usable_size(p));
  __libc_free(p);
}

__attribute__((destructor)) static void totals(void) {
  dprintf(open_log(), "exit pid=%d live=%d registered=%d deregistered=%d events=%d\n", getpid(), live, registered,
          deregistered, events);
}
