from pylog._core.includes.cengine cimport pylog_engine


cdef class IoEngine:
    # Other extensions call pylog_engine_writev/sync on .engine without the GIL.
    cdef pylog_engine *engine
    cdef readonly str kind
    cdef readonly str why
