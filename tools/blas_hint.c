/* Which kernels OpenBLAS chose, and a hint on a terminal when they are far below what
 * the CPU runs. OpenBLAS picks its kernels by CPU model; Debian 12's 0.3.21 does not
 * recognise some newer or virtualised CPUs and falls back to its Prescott (SSE3)
 * kernels, whose matrix products (k-means, exhaustive search, stage 4 at 128-d) ran
 * 1.8-2.2x slower than with OPENBLAS_CORETYPE=SkylakeX on a virtual Xeon with AVX-512
 * (README, Dependencies). The library does not read the environment; the command line
 * may, and says so where the user can act on it. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS only (weak: other BLAS libraries lack it). */
extern char *openblas_get_corename(void) __attribute__((weak));

const char *cli_blas_core(void) {
    return openblas_get_corename ? openblas_get_corename() : NULL;
}

/* The core OpenBLAS should take on this CPU where it took an older one, else NULL. */
static const char *better_core(const char *core) {
#if defined(__x86_64__) && defined(__GNUC__)
    /* OpenBLAS's AVX2 and AVX-512 cores (0.3.21's names; later versions add
     * SapphireRapids and may spell others in another case) */
    static const char *const modern[] = {"Haswell",  "Zen",        "Excavator",
                                         "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof modern / sizeof modern[0]; i++)
        if (!strcasecmp(core, modern[i]))
            return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#else
    (void)core;
#endif
    return NULL;
}

const char *cli_blas_better_core(void) {
    const char *core = cli_blas_core();
    return core ? better_core(core) : NULL;
}

void cli_blas_hint(void) {
    if (isatty(STDERR_FILENO) != 1 || getenv("OPENBLAS_CORETYPE"))
        return;
    const char *better = cli_blas_better_core();
    if (better)
        fprintf(stderr,
                "tartan: note: OpenBLAS runs its %s kernels on this CPU, which can run its "
                "%s ones (OPENBLAS_CORETYPE=%s): about twice as fast for builds and "
                "exhaustive search (README, Dependencies)\n",
                cli_blas_core(), better, better);
}
