/* board.c — _beam.Board (board.h): the page a worker counts its direct calls on. */
#define _GNU_SOURCE
#include "board.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "beam/board.h"

typedef struct board_s {
    PyObject_HEAD
    int fd;
    uint64_t *page; /* BEAM_BOARD_SIZE bytes, shared, read-write */
} board_t;

static PyObject *board_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (!PyArg_ParseTuple(args, ":Board") || (kwargs && PyDict_Size(kwargs)))
        return PyErr_Format(PyExc_TypeError, "Board() takes no arguments");
    int fd = memfd_create("beam-board", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    void *page = MAP_FAILED;
    if (ftruncate(fd, BEAM_BOARD_SIZE) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
        page = mmap(NULL, BEAM_BOARD_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(fd);
        return NULL;
    }
    board_t *b = (board_t *)type->tp_alloc(type, 0);
    if (!b) {
        munmap(page, BEAM_BOARD_SIZE);
        close(fd);
        return NULL;
    }
    b->fd = fd;
    b->page = page;
    return (PyObject *)b;
}

static void board_dealloc(board_t *b)
{
    PyTypeObject *type = Py_TYPE(b);
    munmap(b->page, BEAM_BOARD_SIZE);
    close(b->fd);
    type->tp_free(b);
    Py_DECREF(type);
}

static PyObject *board_start(board_t *b, PyObject *unused)
{
    (void)unused;
    beam_board_bump(b->page, BEAM_BOARD_STARTED);
    Py_RETURN_NONE;
}

static PyObject *board_finish(board_t *b, PyObject *unused)
{
    (void)unused;
    beam_board_bump(b->page, BEAM_BOARD_FINISHED);
    Py_RETURN_NONE;
}

static PyObject *board_pushed(board_t *b, PyObject *unused)
{
    (void)unused;
    beam_board_bump(b->page, BEAM_BOARD_PUSHED);
    Py_RETURN_NONE;
}

static PyObject *board_counts(board_t *b, PyObject *unused)
{
    (void)unused;
    beam_board_counts_t c = beam_board_read(b->page);
    return Py_BuildValue("(KKK)", (unsigned long long)c.started, (unsigned long long)c.finished,
                         (unsigned long long)c.pushed);
}

static PyObject *board_fileno(board_t *b, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(b->fd);
}

static PyObject *board_get_size(board_t *b, void *closure)
{
    (void)b;
    (void)closure;
    return PyLong_FromUnsignedLong(BEAM_BOARD_SIZE);
}

static PyMethodDef board_methods[] = {
    {"start", (PyCFunction)board_start, METH_NOARGS, "start(). A direct call's method begins."},
    {"finish", (PyCFunction)board_finish, METH_NOARGS, "finish(). A direct call's method returned or raised."},
    {"pushed", (PyCFunction)board_pushed, METH_NOARGS, "pushed(). A result goes to its caller on the direct socket."},
    {"counts", (PyCFunction)board_counts, METH_NOARGS, "counts() -> (started, finished, pushed)."},
    {"fileno", (PyCFunction)board_fileno, METH_NOARGS, "fileno() -> the memfd (for the `board` request)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef board_getset[] = {
    {"size", (getter)board_get_size, NULL, "The memfd's size in bytes.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot board_slots[] = {
    {Py_tp_new, board_new},
    {Py_tp_dealloc, board_dealloc},
    {Py_tp_methods, board_methods},
    {Py_tp_getset, board_getset},
    {Py_tp_doc, "Board(): a worker's call board (docs/DESIGN.md, \"Direct calls\"); owns its memfd and mapping."},
    {0, NULL},
};

PyType_Spec pb_board_spec = {
    .name = "_beam.Board",
    .basicsize = sizeof(board_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = board_slots,
};
