/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c) and by their replay driver
 * (tests/fuzz/driver.c), which runs a corpus through the same entry point without
 * libFuzzer so that `make check` replays every seed and every past crash. */
#ifndef TT_FUZZ_H
#define TT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* libFuzzer's entry points; every target defines both. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch directory of this process, on tmpfs (/dev/shm) when there is one:
 * created on first use, removed with everything in it at exit. Never NULL (aborts if
 * it cannot be created: a fuzzer without scratch space finds nothing). */
const char *fz_dir(void);
/* Writes data to fz_dir()/name (replacing it) and returns the path (static buffer per
 * name slot: valid until the next fz_write with the same name). Aborts on failure. */
const char *fz_write(const char *name, const void *data, size_t size);
/* Reads a whole file into a malloc'd buffer; NULL if it cannot be read. */
uint8_t *fz_read(const char *path, size_t *size);
/* Removes a directory tree of regular files (depth 1, as index directories are). */
void fz_rmdir(const char *dir);
/* Number of open file descriptors of this process: targets compare it before and
 * after each input, so that a reader that leaks a descriptor on some path fails. */
int fz_count_fds(void);

#endif
