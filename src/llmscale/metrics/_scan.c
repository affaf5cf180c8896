/*
 * Reading a metrics page through its learnt layout in one pass of C (metrics/exposition.py's
 * _Layout.numbers). A replica writes the same lines on every scrape; only the value ending each
 * sample line changes. The Python reader checks a page against its layout with whole-list
 * operations (split the page into lines, cut each learnt prefix, convert each value with float()):
 * ~130 us a 352-line vLLM page, most of it allocating two strings a line. This walks the page's
 * characters once, compares each line with its prefix in place and converts each value without
 * making a string of it: ~25 us for the same page (benchmarks/controller_tick.py prints both).
 *
 * It only ever accepts what the Python reader accepts, with the same numbers: anything it does
 * not handle here (a page or prefix that is not ASCII, a value token of more than 63 characters,
 * a token float() might read differently) answers None, and the caller reads that page with the
 * Python code, which decides. tests/metrics/test_layout_scan.py checks both on random pages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* A value token longer than this is handed to the Python reader (a vLLM value is <= 24). */
#define MAX_TOKEN 63

static PyObject *
layout_numbers(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "layout_numbers(text, prefixes, kinds) takes 3 arguments");
        return NULL;
    }
    PyObject *text = args[0], *prefixes = args[1], *kinds = args[2];
    if (!PyUnicode_Check(text) || !PyTuple_Check(prefixes) || !PyBytes_Check(kinds)) {
        PyErr_SetString(PyExc_TypeError, "layout_numbers(str, tuple[str, ...], bytes)");
        return NULL;
    }
    Py_ssize_t n_lines = PyTuple_GET_SIZE(prefixes);
    if (PyBytes_GET_SIZE(kinds) != n_lines) {
        PyErr_SetString(PyExc_ValueError, "one kind per prefix");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text)) {
        Py_RETURN_NONE; /* one byte a character only when ASCII; the Python reader takes the rest */
    }
    const char *s = (const char *)PyUnicode_DATA(text);
    const Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    const char *kind = PyBytes_AS_STRING(kinds);
    Py_ssize_t n_values = 0;
    for (Py_ssize_t i = 0; i < n_lines; i++) {
        n_values += kind[i] != 0;
    }
    PyObject *out = PyList_New(n_values);
    if (out == NULL) {
        return NULL;
    }
    char token[MAX_TOKEN + 1];
    Py_ssize_t pos = 0, k = 0;
    for (Py_ssize_t i = 0; i < n_lines; i++) {
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, i);
        if (!PyUnicode_Check(prefix) || !PyUnicode_IS_ASCII(prefix)) {
            goto not_here;
        }
        Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
        if (plen > len - pos || memcmp(s + pos, PyUnicode_DATA(prefix), (size_t)plen) != 0) {
            goto not_here;
        }
        pos += plen;
        const char *nl = memchr(s + pos, '\n', (size_t)(len - pos));
        /* as many lines as learnt: a line break after every line but the last */
        if ((i == n_lines - 1) != (nl == NULL)) {
            goto not_here;
        }
        Py_ssize_t end = nl == NULL ? len : nl - s;
        if (kind[i]) {
            Py_ssize_t tlen = end - pos;
            if (tlen == 0 || tlen > MAX_TOKEN) {
                goto not_here;
            }
            /* one printable token: no blank (a timestamp after the value), no '_' (float() reads
               1_000, the format does not), no control character */
            for (Py_ssize_t j = pos; j < end; j++) {
                unsigned char c = (unsigned char)s[j];
                if (c <= ' ' || c > '~' || c == '_') {
                    goto not_here;
                }
            }
            memcpy(token, s + pos, (size_t)tlen);
            token[tlen] = '\0';
            char *stop = NULL;
            /* float()'s own conversion of a token without blanks or underscores */
            double v = PyOS_string_to_double(token, &stop, NULL);
            if (v == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                goto not_here;
            }
            if (stop != token + tlen) {
                goto not_here; /* not a number: the Python reader says so */
            }
            PyObject *number = PyFloat_FromDouble(v);
            if (number == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, k++, number);
        }
        else if (end != pos) {
            goto not_here; /* a comment or blank line with more than was learnt */
        }
        pos = end + 1;
    }
    return out;

not_here:
    Py_DECREF(out); /* the slots not filled are NULL, which a list's deallocation skips */
    Py_RETURN_NONE;
}

/* Whether every value of vals (a list of floats) is within [0, most] and vals[first:end] never
   falls for every (first, end) of runs (a histogram's counts): ParsedPage.plain. NaN fails, as it
   fails Python's comparisons. */
static PyObject *
plain_numbers(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1]) || !PyFloat_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "plain_numbers(list[float], tuple[tuple[int, int], ...], float)");
        return NULL;
    }
    PyObject *vals = args[0], *runs = args[1];
    const double most = PyFloat_AS_DOUBLE(args[2]);
    const Py_ssize_t n = PyList_GET_SIZE(vals);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(vals, i);
        if (!PyFloat_CheckExact(item)) {
            PyErr_SetString(PyExc_TypeError, "values are floats");
            return NULL;
        }
        double v = PyFloat_AS_DOUBLE(item);
        if (!(v >= 0.0 && v <= most)) {
            Py_RETURN_FALSE;
        }
    }
    for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(runs); r++) {
        PyObject *run = PyTuple_GET_ITEM(runs, r);
        if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != 2) {
            PyErr_SetString(PyExc_TypeError, "a run is a (first, end) pair");
            return NULL;
        }
        Py_ssize_t first = PyLong_AsSsize_t(PyTuple_GET_ITEM(run, 0));
        Py_ssize_t stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(run, 1));
        if (PyErr_Occurred()) {
            return NULL;
        }
        if (first < 0 || stop > n || first > stop) {
            PyErr_SetString(PyExc_IndexError, "a run outside the values");
            return NULL;
        }
        for (Py_ssize_t i = first + 1; i < stop; i++) {
            if (!(PyFloat_AS_DOUBLE(PyList_GET_ITEM(vals, i - 1)) <= PyFloat_AS_DOUBLE(PyList_GET_ITEM(vals, i)))) {
                Py_RETURN_FALSE;
            }
        }
    }
    Py_RETURN_TRUE;
}

/* The values of a list of floats as the bytes of C doubles (array('d').frombytes takes them at
   once; array('d', vals) converts one element at a time, ~13 us for a 352-line page). */
static PyObject *
doubles(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "doubles(list[float])");
        return NULL;
    }
    const Py_ssize_t n = PyList_GET_SIZE(arg);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (out == NULL) {
        return NULL;
    }
    double *d = (double *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(arg, i);
        if (!PyFloat_CheckExact(item)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "values are floats");
            return NULL;
        }
        d[i] = PyFloat_AS_DOUBLE(item);
    }
    return out;
}

static PyMethodDef scan_methods[] = {
    {"layout_numbers", (PyCFunction)(void (*)(void))layout_numbers, METH_FASTCALL,
     "layout_numbers(text, prefixes, kinds) -> list[float] | None\n\n"
     "The values of text's sample lines when every line i starts with prefixes[i] and is followed\n"
     "by one number token (kinds[i] != 0) or by nothing (kinds[i] == 0); None when the page does\n"
     "not match or is not read here (the Python reader decides)."},
    {"plain_numbers", (PyCFunction)(void (*)(void))plain_numbers, METH_FASTCALL,
     "plain_numbers(vals, runs, most) -> bool\n\n"
     "Whether every value is within [0, most] and vals[first:end] never falls for every run."},
    {"doubles", doubles, METH_O, "doubles(vals) -> bytes: the floats of a list as C doubles."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "llmscale.metrics._scan",
    "A metrics page's values read through its learnt layout, in C (metrics/exposition.py).", -1,
    scan_methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModule_Create(&scan_module);
}
