# C types for the cold render loop when setup.py compiles render.py; the .py stays the
# source (docs/architecture.md, "Compiled modules"). Only counters, our own containers and
# the message (a dict, as everywhere) are typed; nothing else changes.
import cython

@cython.locals(msg=dict, text=str, body=str, pieces=list, total=cython.Py_ssize_t,
               chars=cython.Py_ssize_t, images=cython.Py_ssize_t)
cpdef tuple raw_pieces(msgs, dict calls, Py_ssize_t image_cost)

@cython.locals(chars=cython.Py_ssize_t, lines=list, register=cython.bint)
cpdef Py_ssize_t _render_calls(role, body, tool_calls, dict calls, append) except -1
