/* distrs.scaling._serve: SIMULATE's two serve loops (simulate.py) in C.

Why C: the search (Alg. 1) runs one simulation per probe, and a probe serves every queued
request of a stage through a heap of worker-free times and a queue of waiting requests, a heap
operation or two per request. In Python that is about 1 us per request, so a probe over 66k
requests costs tens of ms and a first decision close to a second; here a probe costs 2-3 ms.
No dependency of the project offers this loop (numpy, scipy and ortools have no deadline-checked,
non-preemptive priority queue over a multi-server pool, and numba is not a dependency), so it is
written out by hand.

The loops are the Python ones (simulate.serve_fcfs, simulate.serve_priority) statement for
statement: the same double operations in the same order (end = s0 + svc[i]) and the same
comparisons with the same strictness, so the start times and the early failures are the Python
loops' to the bit. The worker-free times are a heap run by heapq's own algorithm, so they end in
the very state heapq leaves them in (the Python loops' free-flow bulk path only changes that
layout, never the answer). The waiting requests are a bitset of their ranks rather than a heap:
it yields the same best-ranked request, faster. Arrays come in through the buffer protocol
(numpy float64 / int64, C-contiguous, no copies); the start times are written into the caller's
array. Built against the limited API of CPython 3.11 (abi3): one binary for every CPython 3.11+.
*/
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

typedef long long i64;

/* ---- heapq's algorithms, on doubles and on int64 ranks ------------------------------------ */

/* heapq._siftdown: move heap[pos] up towards startpos. */
static void sift_down_d(double *h, Py_ssize_t startpos, Py_ssize_t pos) {
    double item = h[pos];
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        double parent = h[parentpos];
        if (item < parent) {
            h[pos] = parent;
            pos = parentpos;
            continue;
        }
        break;
    }
    h[pos] = item;
}

/* heapq._siftup: the smaller child moves up to the leaves, then the item sifts back down.
   The choice of child is written without a branch (it is a coin toss on random data, and
   this is the hot path); a lone last child is taken as heapq takes it. */
static void sift_up_d(double *h, Py_ssize_t endpos, Py_ssize_t pos) {
    Py_ssize_t startpos = pos;
    double item = h[pos];
    Py_ssize_t child = 2 * pos + 1;
    while (child + 1 < endpos) {
        child += !(h[child] < h[child + 1]);
        h[pos] = h[child];
        pos = child;
        child = 2 * pos + 1;
    }
    if (child < endpos) {
        h[pos] = h[child];
        pos = child;
    }
    h[pos] = item;
    sift_down_d(h, startpos, pos);
}

/* heapq.heapreplace: pop the smallest, push item. */
static inline void replace_d(double *h, Py_ssize_t n, double item) {
    h[0] = item;
    sift_up_d(h, n, 0);
}

/* ---- the queue of waiting requests: their ranks in a bitset ------------------------------ */

/* The ranks are a permutation of [0, n), so the waiting requests are a set of small integers and
   the best-ranked one is the lowest set bit: a bitset over [0, n) with one summary level per 64x
   (bit b of a word above says word b below is not empty) answers it in a few word reads, where
   heapq walks log2(queue) levels. It pops the same rank heapq would; only the speed differs. */

#if defined(_MSC_VER)
#include <intrin.h>
static inline int ctz64(unsigned long long x) {
    unsigned long i;
    _BitScanForward64(&i, x);
    return (int)i;
}
#else
static inline int ctz64(unsigned long long x) { return __builtin_ctzll(x); }
#endif

#define BITS_MAX_DEPTH 8

typedef struct {
    unsigned long long *w[BITS_MAX_DEPTH]; /* w[0]: one bit per rank; w[depth-1]: one word */
    int depth;
    Py_ssize_t count;
    unsigned long long *mem;
} Bits;

static int bits_init(Bits *b, Py_ssize_t n) {
    Py_ssize_t sizes[BITS_MAX_DEPTH], total = 0, m = n > 0 ? n : 1;
    b->depth = 0;
    b->count = 0;
    do {
        m = (m + 63) / 64;
        sizes[b->depth++] = m;
        total += m;
    } while (m > 1 && b->depth < BITS_MAX_DEPTH);
    b->mem = calloc((size_t)total, sizeof(unsigned long long));
    if (b->mem == NULL)
        return -1;
    unsigned long long *at = b->mem;
    for (int d = 0; d < b->depth; d++) {
        b->w[d] = at;
        at += sizes[d];
    }
    return 0;
}

static inline void bits_add(Bits *b, i64 x) {
    b->count++;
    for (int d = 0; d < b->depth; d++) {
        unsigned long long old = b->w[d][x >> 6];
        b->w[d][x >> 6] = old | (1ULL << (x & 63));
        if (old)
            break;
        x >>= 6;
    }
}

static inline i64 bits_min(const Bits *b) {
    i64 x = 0;
    for (int d = b->depth - 1; d >= 0; d--)
        x = (x << 6) | ctz64(b->w[d][x]);
    return x;
}

static inline void bits_remove(Bits *b, i64 x) {
    b->count--;
    for (int d = 0; d < b->depth; d++) {
        unsigned long long now = b->w[d][x >> 6] & ~(1ULL << (x & 63));
        b->w[d][x >> 6] = now;
        if (now)
            break;
        x >>= 6;
    }
}

/* heapq.heappop */
static inline i64 bits_pop(Bits *b) {
    i64 x = bits_min(b);
    bits_remove(b, x);
    return x;
}

/* heapq.heappushpop: item itself unless a smaller one waits. */
static inline i64 bits_pushpop(Bits *b, i64 item) {
    if (b->count > 0) {
        i64 x = bits_min(b);
        if (x < item) {
            bits_remove(b, x);
            bits_add(b, item);
            return x;
        }
    }
    return item;
}

/* ---- the loops ------------------------------------------------------------------------------ */

/* serve_fcfs; returns 1 when every request was served, 0 on an early failure. */
static int loop_fcfs(Py_ssize_t n, const double *arr, const double *svc, double *free_, Py_ssize_t nfree,
                     const double *wait_limit, const double *limit, double *start) {
    for (Py_ssize_t i = 0; i < n; i++) {
        double a = arr[i];
        double f = free_[0];
        double s0;
        if (a >= f) {
            s0 = a;
        } else {
            if (f > wait_limit[i])
                return 0;
            s0 = f;
        }
        double end = s0 + svc[i];
        if (end > limit[i])
            return 0;
        start[i] = s0;
        replace_d(free_, nfree, end);
    }
    return 1;
}

/* serve_priority */
static int loop_priority(Py_ssize_t n, const double *arr, const double *svc, const i64 *rank, const i64 *inv,
                         double *free_, Py_ssize_t nfree, const double *wait_limit, const double *limit,
                         double *start, Bits *ready) {
    Py_ssize_t i = 0;
    while (i < n) {
        double a = arr[i];
        double f = free_[0];
        if (a >= f) {
            double end = a + svc[i];
            if (end > limit[i])
                return 0;
            start[i] = a;
            replace_d(free_, nfree, end);
            i++;
            continue;
        }
        /* A busy period: serve by rank until the queue is empty again. */
        for (;;) {
            Py_ssize_t j;
            if (i < n && arr[i] < f) {
                while (i + 1 < n && arr[i + 1] < f) {
                    bits_add(ready, rank[i]);
                    i++;
                }
                j = (Py_ssize_t)inv[bits_pushpop(ready, rank[i])];
                i++;
            } else {
                j = (Py_ssize_t)inv[bits_pop(ready)];
            }
            if (f > arr[j] && f > wait_limit[j])
                return 0;
            double end = f + svc[j];
            if (end > limit[j])
                return 0;
            start[j] = f;
            replace_d(free_, nfree, end);
            if (ready->count == 0)
                break;
            f = free_[0];
        }
    }
    return 1;
}

/* ---- arguments ------------------------------------------------------------------------------ */

typedef struct {
    Py_buffer view;
    int held;
} Arg;

/* A C-contiguous 1-d buffer of 8-byte items of kind 'd' (double) or 'q' (int64). */
static int get_arg(PyObject *obj, Arg *out, char kind, int writable, Py_ssize_t want, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &out->view, flags) < 0)
        return -1;
    out->held = 1;
    const char *fmt = out->view.format ? out->view.format : "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    int ok_fmt = kind == 'd' ? (strcmp(fmt, "d") == 0) : (strcmp(fmt, "q") == 0 || strcmp(fmt, "l") == 0);
    if (!ok_fmt || out->view.itemsize != 8 || out->view.ndim > 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-d %s array", name,
                     kind == 'd' ? "float64" : "int64");
        return -1;
    }
    if (want >= 0 && out->view.len / 8 != want) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items, got %zd", name, want, out->view.len / 8);
        return -1;
    }
    return 0;
}

static void release_all(Arg *args, int count) {
    for (int k = 0; k < count; k++)
        if (args[k].held)
            PyBuffer_Release(&args[k].view);
}

/* Indices must lie in [0, bound): a bad one must not read or write out of bounds. */
static int check_index(const i64 *v, Py_ssize_t n, Py_ssize_t bound, const char *name) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= (i64)bound) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] out of range", name, i);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(fcfs_doc,
             "fcfs(arr, svc, free, wait_limit, limit, start) -> bool\n\n"
             "simulate.serve_fcfs over float64 arrays: `free` (a heap) is updated in place and\n"
             "`start` receives the start times; False on an early failure.");

static PyObject *serve_fcfs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:fcfs", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    Arg a[6];
    memset(a, 0, sizeof a);
    int ok = 0;
    if (get_arg(o[0], &a[0], 'd', 0, -1, "arr") < 0)
        goto done;
    Py_ssize_t n = a[0].view.len / 8;
    if (get_arg(o[1], &a[1], 'd', 0, n, "svc") < 0 || get_arg(o[2], &a[2], 'd', 1, -1, "free") < 0 ||
        get_arg(o[3], &a[3], 'd', 0, n, "wait_limit") < 0 || get_arg(o[4], &a[4], 'd', 0, n, "limit") < 0 ||
        get_arg(o[5], &a[5], 'd', 1, n, "start") < 0)
        goto done;
    Py_ssize_t nfree = a[2].view.len / 8;
    if (n > 0 && nfree == 0) {
        PyErr_SetString(PyExc_IndexError, "free: no workers");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = loop_fcfs(n, a[0].view.buf, a[1].view.buf, a[2].view.buf, nfree, a[3].view.buf, a[4].view.buf,
                   a[5].view.buf);
    Py_END_ALLOW_THREADS
    release_all(a, 6);
    return PyBool_FromLong(ok);
done:
    release_all(a, 6);
    return NULL;
}

PyDoc_STRVAR(priority_doc,
             "priority(arr, svc, rank, inv, free, wait_limit, limit, start) -> bool\n\n"
             "simulate.serve_priority over float64 arrays and int64 `rank` / `inv` (its inverse\n"
             "permutation): `free` (a heap) is updated in place and `start` receives the start\n"
             "times; False on an early failure.");

static PyObject *serve_priority(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO:priority", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7]))
        return NULL;
    Arg a[8];
    memset(a, 0, sizeof a);
    int ok = 0;
    Bits ready;
    ready.mem = NULL;
    if (get_arg(o[0], &a[0], 'd', 0, -1, "arr") < 0)
        goto done;
    Py_ssize_t n = a[0].view.len / 8;
    if (get_arg(o[1], &a[1], 'd', 0, n, "svc") < 0 || get_arg(o[2], &a[2], 'q', 0, n, "rank") < 0 ||
        get_arg(o[3], &a[3], 'q', 0, n, "inv") < 0 || get_arg(o[4], &a[4], 'd', 1, -1, "free") < 0 ||
        get_arg(o[5], &a[5], 'd', 0, n, "wait_limit") < 0 || get_arg(o[6], &a[6], 'd', 0, n, "limit") < 0 ||
        get_arg(o[7], &a[7], 'd', 1, n, "start") < 0)
        goto done;
    Py_ssize_t nfree = a[4].view.len / 8;
    if (n > 0 && nfree == 0) {
        PyErr_SetString(PyExc_IndexError, "free: no workers");
        goto done;
    }
    if (check_index(a[2].view.buf, n, n, "rank") < 0 || check_index(a[3].view.buf, n, n, "inv") < 0)
        goto done;
    if (bits_init(&ready, n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = loop_priority(n, a[0].view.buf, a[1].view.buf, a[2].view.buf, a[3].view.buf, a[4].view.buf, nfree,
                       a[5].view.buf, a[6].view.buf, a[7].view.buf, &ready);
    Py_END_ALLOW_THREADS
    free(ready.mem);
    release_all(a, 8);
    return PyBool_FromLong(ok);
done:
    free(ready.mem);
    release_all(a, 8);
    return NULL;
}

/* ---- counts for the search's lower bound (Simulator.no_wait_bound) ------------------------- */

PyDoc_STRVAR(prefix_counts_doc,
             "prefix_counts(level, nlevels, prefix, upto, out) -> None\n\n"
             "out[q] = #{j < prefix[q] : level[j] <= upto[q]} for every query q (int64 arrays;\n"
             "levels in [0, nlevels), prefixes in [0, len(level)]). One sweep with a Fenwick\n"
             "tree over the levels, O((n + queries) log nlevels), where numpy needs a pass over\n"
             "the n items per level.");

static PyObject *prefix_counts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[4];
    Py_ssize_t nlevels;
    if (!PyArg_ParseTuple(args, "OnOOO:prefix_counts", &o[0], &nlevels, &o[1], &o[2], &o[3]))
        return NULL;
    Arg a[4];
    memset(a, 0, sizeof a);
    i64 *tree = NULL, *first = NULL, *order = NULL;
    if (get_arg(o[0], &a[0], 'q', 0, -1, "level") < 0 || get_arg(o[1], &a[1], 'q', 0, -1, "prefix") < 0)
        goto done;
    Py_ssize_t n = a[0].view.len / 8, nq = a[1].view.len / 8;
    if (get_arg(o[2], &a[2], 'q', 0, nq, "upto") < 0 || get_arg(o[3], &a[3], 'q', 1, nq, "out") < 0)
        goto done;
    const i64 *level = a[0].view.buf, *prefix = a[1].view.buf, *upto = a[2].view.buf;
    i64 *out = a[3].view.buf;
    if (nlevels < 1) {
        PyErr_SetString(PyExc_ValueError, "nlevels must be positive");
        goto done;
    }
    if (check_index(level, n, nlevels, "level") < 0 || check_index(prefix, nq, n + 1, "prefix") < 0 ||
        check_index(upto, nq, nlevels, "upto") < 0)
        goto done;
    tree = calloc((size_t)nlevels + 1, sizeof(i64));
    first = calloc((size_t)n + 2, sizeof(i64));
    order = malloc(sizeof(i64) * (size_t)(nq > 0 ? nq : 1));
    if (tree == NULL || first == NULL || order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* the queries by prefix (a counting sort): those with prefix p are order[first[p] .. first[p+1]) */
    for (Py_ssize_t q = 0; q < nq; q++)
        first[prefix[q] + 1]++;
    for (Py_ssize_t p = 0; p <= n; p++)
        first[p + 1] += first[p];
    for (Py_ssize_t q = 0; q < nq; q++)
        order[first[prefix[q]]++] = q;
    /* first[p] now ends bucket p; bucket p starts where bucket p-1 ends */
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j <= n; j++) {
        for (; at < first[j]; at++) { /* queries with prefix j: the first j items are in */
            Py_ssize_t q = (Py_ssize_t)order[at];
            i64 sum = 0;
            for (i64 i = upto[q] + 1; i > 0; i -= i & -i)
                sum += tree[i];
            out[q] = sum;
        }
        if (j < n)
            for (i64 i = level[j] + 1; i <= nlevels; i += i & -i)
                tree[i]++;
    }
    Py_END_ALLOW_THREADS
    free(tree);
    free(first);
    free(order);
    release_all(a, 4);
    Py_RETURN_NONE;
done:
    free(tree);
    free(first);
    free(order);
    release_all(a, 4);
    return NULL;
}

static PyMethodDef methods[] = {
    {"fcfs", serve_fcfs, METH_VARARGS, fcfs_doc},
    {"priority", serve_priority, METH_VARARGS, priority_doc},
    {"prefix_counts", prefix_counts, METH_VARARGS, prefix_counts_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "distrs.scaling._serve",
    "SIMULATE's serve loops in C (see simulate.py and serve_native.py).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__serve(void) { return PyModuleDef_Init(&moduledef); }
