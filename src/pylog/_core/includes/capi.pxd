# The capsules of core_api.h (see there): exporters and importers.

cdef extern from "core_api.h":
    const char *PYLOG_CRC_CAPSULE
    const char *PYLOG_RECORDS_CAPSULE
    ctypedef struct pylog_crc_api:
        pass
    ctypedef struct pylog_records_api:
        pass
    const pylog_crc_api pylog_crc_api_table
    const pylog_records_api pylog_records_api_table
    int pylog_import_crc_api() except -1
    int pylog_import_records_api() except -1
