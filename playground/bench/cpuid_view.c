/* A process's view of an AVX2-only CPU on a CPU with AVX-512: loaded with LD_PRELOAD (playground/bench/cpuview.py).
 *
 * Libraries choose their kernels from the `cpuid` instruction (ONNX Runtime's MLAS, llama.cpp's variant loader,
 * PyTorch's cpuinfo). Linux can make `cpuid` fault in a process (arch_prctl ARCH_SET_CPUID, on CPUs with
 * "cpuid_fault" in /proc/cpuinfo). This library, at load, reads every leaf this CPU has into a table, turns
 * faulting on, and answers each faulting `cpuid` from the table with the features of the view cleared:
 * AVX-512 (every subset), AVX-VNNI, AVX-IFMA, AVX512-BF16/FP16 and AMX. Whoever then asks sees a CPU with AVX2
 * and FMA, and runs its AVX2 kernels; the instructions themselves still run (nothing is emulated), so a library
 * that does not ask `cpuid` is not changed.
 *
 * The answer comes from the table, with no system call, so a sandboxed child (a browser's renderer) keeps
 * working. A program that installs its own SIGSEGV handler gets it chained behind this one (sigaction and
 * signal are wrapped): a fault that is not `cpuid` goes on to it, or to the default action.
 *
 * Faulting is per thread and inherited by the threads and children a process starts; exec clears it, and
 * LD_PRELOAD, inherited too, sets it again in the new program.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define SUBLEAVES 64
#define BASIC 0x40
#define EXTENDED 0x40

/* regs[leaf][subleaf] = eax, ebx, ecx, edx */
static uint32_t basic[BASIC][SUBLEAVES][4];
static uint32_t extended[EXTENDED][SUBLEAVES][4];
static uint32_t max_basic, max_extended;
static int installed;                   /* faulting on, the handler in place */
static struct sigaction next_handler;   /* the program's own SIGSEGV handler, chained */
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static void cpuid_raw(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* The view: what an AVX2-only CPU (a Zen 3 EPYC) does not have. */
static void hide(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (leaf == 7 && sub == 0) {
        /* EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL */
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        /* ECX: AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512_FP16, AMX-TILE, AMX-INT8 */
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        /* EAX: AVX-VNNI, AVX512_BF16, AMX-FP16, AVX-IFMA */
        r[0] &= ~((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23));
        /* EDX: AVX-VNNI-INT8, AVX-NE-CONVERT, AMX-COMPLEX, AVX10 */
        r[3] &= ~((1u << 4) | (1u << 5) | (1u << 8) | (1u << 19));
    } else if (leaf == 0x1d || leaf == 0x1e || leaf == 0x24) {
        /* the AMX palette and tile information, the AVX10 leaf */
        r[0] = r[1] = r[2] = r[3] = 0;
    }
}

static int answer(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    uint32_t s = sub < SUBLEAVES ? sub : SUBLEAVES - 1;
    if (leaf <= max_basic && leaf < BASIC) {
        memcpy(r, basic[leaf][s], 16);
        return 1;
    }
    if (leaf >= 0x80000000u && leaf <= max_extended && leaf - 0x80000000u < EXTENDED) {
        memcpy(r, extended[leaf - 0x80000000u][s], 16);
        return 1;
    }
    if (leaf > max_basic && leaf < 0x40000000u) {
        /* past the last leaf: a CPU answers with the last basic leaf's values */
        memcpy(r, basic[max_basic < BASIC ? max_basic : BASIC - 1][0], 16);
        return 1;
    }
    return 0;
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    uint32_t r[4];
    if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
        uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
        if (!answer(leaf, sub, r)) {
            /* a leaf outside the table (hypervisor leaves): ask the CPU itself */
            syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
            cpuid_raw(leaf, sub, r);
            syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
            hide(leaf, sub, r);
        }
        g[REG_RAX] = r[0];
        g[REG_RBX] = r[1];
        g[REG_RCX] = r[2];
        g[REG_RDX] = r[3];
        g[REG_RIP] += 2;
        return;
    }
    if (next_handler.sa_flags & SA_SIGINFO) {
        next_handler.sa_sigaction(sig, info, context);
        return;
    }
    if (next_handler.sa_handler != SIG_DFL && next_handler.sa_handler != SIG_IGN) {
        next_handler.sa_handler(sig);
        return;
    }
    /* the default action: put it back and return, so the same instruction faults again and ends the process */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction)
        real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGSEGV || !installed)
        return real_sigaction(sig, act, old);
    if (old)
        *old = next_handler;
    if (act)
        next_handler = *act;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

__attribute__((constructor)) static void start(void) {
    uint32_t r[4];
    real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    cpuid_raw(0, 0, r);
    uint32_t top = r[0];
    cpuid_raw(0x80000000u, 0, r);
    max_extended = r[0];
    for (uint32_t leaf = 0; leaf < BASIC && leaf <= top; leaf++)
        for (uint32_t sub = 0; sub < SUBLEAVES; sub++) {
            cpuid_raw(leaf, sub, basic[leaf][sub]);
            hide(leaf, sub, basic[leaf][sub]);
        }
    for (uint32_t i = 0; i < EXTENDED && 0x80000000u + i <= max_extended; i++)
        for (uint32_t sub = 0; sub < SUBLEAVES; sub++)
            cpuid_raw(0x80000000u + i, sub, extended[i][sub]);
    max_basic = top;
    memset(&next_handler, 0, sizeof next_handler);
    real_sigaction(SIGSEGV, NULL, &next_handler);
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = on_segv;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    if (real_sigaction(SIGSEGV, &mine, NULL) != 0 || syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        static const char why[] = "cpuid_view: this CPU or kernel cannot make cpuid fault (arch_prctl ARCH_SET_CPUID)\n";
        (void)!write(2, why, sizeof why - 1);
        _exit(97);
    }
    installed = 1;
}
