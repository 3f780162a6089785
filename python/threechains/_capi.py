"""The C API (<threechains/threechains.h>) as ctypes declarations.

Only this module knows the C signatures and struct layouts; the rest of the
package wraps them in classes. Keep it in step with the header: the option
structs carry their size, so a field added at the end of one here and in the
header is all a new option needs."""

import ctypes
import ctypes.util
import os

from . import _location

c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p


def _load():
    """libthreechains: $THREECHAINS_LIBRARY, else where this package was built
    or installed with it, else the loader's search path."""
    candidates = [os.environ.get("THREECHAINS_LIBRARY"), _location.LIBRARY,
                  ctypes.util.find_library("threechains")]
    tried = []
    for path in candidates:
        if not path:
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path}: {error}")
    raise ImportError("threechains: cannot load libthreechains (set THREECHAINS_LIBRARY); tried "
                      + ("; ".join(tried) or "nothing"))


lib = _load()

ERROR_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_int, c_char_p)


class ReceiverOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("port", ctypes.c_uint16), ("trust", c_void_p),
                ("identity", c_void_p), ("target_args", c_void_p),
                ("max_slots", ctypes.c_uint32), ("max_slot_size", c_size_t),
                ("unrestricted_imports", ctypes.c_int), ("on_error", ERROR_FN),
                ("on_error_user", c_void_p), ("target_args_bytes", c_size_t),
                ("gpu", ctypes.c_int), ("gpu_device", ctypes.c_int),
                ("confined_time_budget_us", ctypes.c_uint64),
                ("compile_time_limit_ms", ctypes.c_uint64),
                ("compile_memory_limit", c_size_t), ("max_code_bytes_per_key", c_size_t),
                ("helper_cpus", ctypes.POINTER(ctypes.c_int)), ("helper_cpu_count", c_size_t)]


class ReceiverStats(ctypes.Structure):
    _fields_ = [("size", c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "frames_dispatched", "frames_rejected", "code_loads", "cache_misses", "peers_connected",
        "peers_closed", "peers_lost", "peers_refused", "code_refused", "evictions",
        "last_load_ns", "code_trapped", "sleeps", "doorbells", "frames_in_window_runs")]


class IfuncStats(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint64), ("name", ctypes.c_char * 64), ("loaded", ctypes.c_uint32),
                ("in_window", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in (
            "calls", "payload_bytes", "refusals", "traps", "timed_calls", "timed_ns")]


class ChannelOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("slots", ctypes.c_uint32), ("slot_size", c_size_t),
                ("connect_timeout_ms", ctypes.c_uint32), ("timeout_ms", ctypes.c_uint32),
                ("identity", c_void_p), ("target_key", c_void_p)]


class NodeOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("receiver", ctypes.POINTER(ReceiverOptions)),
                ("channel", ctypes.POINTER(ChannelOptions)),
                ("exposed_names", ctypes.POINTER(c_char_p)),
                ("exposed_objects", ctypes.POINTER(c_void_p)), ("exposed_count", c_size_t)]


def _declare(name, restype, *argtypes):
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


_P = ctypes.POINTER(c_void_p)
_status = ctypes.c_int
for _name, _restype, _args in [
        ("threechains_last_error", c_char_p, ()),
        ("threechains_status_string", c_char_p, (ctypes.c_int,)),
        ("threechains_version", c_char_p, ()),
        ("threechains_context_create", _status, (c_char_p, _P)),
        ("threechains_context_destroy", None, (c_void_p,)),
        ("threechains_worker_create", _status, (c_void_p, _P)),
        ("threechains_worker_destroy", None, (c_void_p,)),
        ("threechains_worker_progress", ctypes.c_uint, (c_void_p,)),
        ("threechains_keypair_load", _status, (c_char_p, _P)),
        ("threechains_keypair_generate", _status, (_P,)),
        ("threechains_keypair_destroy", None, (c_void_p,)),
        ("threechains_keypair_public", _status, (c_void_p, _P)),
        ("threechains_public_key_load", _status, (c_char_p, _P)),
        ("threechains_public_key_destroy", None, (c_void_p,)),
        ("threechains_trust_create", _status, (_P,)),
        ("threechains_trust_anyone", _status, (_P,)),
        ("threechains_trust_allow_peer", _status, (c_void_p, c_void_p)),
        ("threechains_trust_allow_code_signer", _status, (c_void_p, c_void_p)),
        ("threechains_trust_allow_native_code_signer", _status, (c_void_p, c_void_p)),
        ("threechains_trust_destroy", None, (c_void_p,)),
        ("threechains_ifunc_load", _status, (c_char_p, _P)),
        ("threechains_ifunc_from_memory", _status, (c_void_p, c_size_t, _P)),
        ("threechains_ifunc_destroy", None, (c_void_p,)),
        ("threechains_ifunc_name", c_char_p, (c_void_p,)),
        ("threechains_ifunc_id", ctypes.c_uint64, (c_void_p,)),
        ("threechains_receiver_options_init", None, (ctypes.POINTER(ReceiverOptions),)),
        ("threechains_receiver_create", _status,
         (c_void_p, ctypes.POINTER(ReceiverOptions), _P)),
        ("threechains_receiver_destroy", None, (c_void_p,)),
        ("threechains_receiver_port", ctypes.c_uint16, (c_void_p,)),
        ("threechains_receiver_poll", _status, (c_void_p, ctypes.POINTER(ctypes.c_uint))),
        ("threechains_receiver_start", _status, (c_void_p,)),
        ("threechains_receiver_stop", None, (c_void_p,)),
        ("threechains_receiver_stats_get", _status, (c_void_p, ctypes.POINTER(ReceiverStats))),
        ("threechains_receiver_ifunc_stats", _status,
         (c_void_p, ctypes.POINTER(IfuncStats), c_size_t, c_size_t, ctypes.POINTER(c_size_t))),
        ("threechains_receiver_peers", c_size_t, (c_void_p,)),
        ("threechains_receiver_allocate_device", _status,
         (c_void_p, c_char_p, c_size_t, ctypes.POINTER(c_void_p))),
        ("threechains_receiver_expose_device", _status, (c_void_p, c_char_p, c_void_p, c_size_t)),
        ("threechains_receiver_allocate_exposed", _status,
         (c_void_p, c_char_p, c_size_t, ctypes.c_int, ctypes.POINTER(c_void_p))),
        ("threechains_receiver_set_target_args_sized", _status, (c_void_p, c_void_p, c_size_t)),
        ("threechains_receiver_copy_to_device", _status, (c_void_p, c_void_p, c_void_p, c_size_t)),
        ("threechains_receiver_copy_from_device", _status,
         (c_void_p, c_void_p, c_void_p, c_size_t)),
        ("threechains_channel_options_init", None, (ctypes.POINTER(ChannelOptions),)),
        ("threechains_source_create", _status, (c_void_p, _P)),
        ("threechains_source_destroy", None, (c_void_p,)),
        ("threechains_source_connect", _status,
         (c_void_p, c_char_p, ctypes.c_uint16, ctypes.POINTER(ChannelOptions), _P)),
        ("threechains_channel_send", _status, (c_void_p, c_void_p, c_void_p, c_size_t)),
        ("threechains_channel_try_send", _status, (c_void_p, c_void_p, c_void_p, c_size_t)),
        ("threechains_channel_flush", _status, (c_void_p,)),
        ("threechains_channel_close", _status, (c_void_p,)),
        ("threechains_channel_destroy", None, (c_void_p,)),
        ("threechains_channel_progress", ctypes.c_uint, (c_void_p,)),
        ("threechains_channel_max_payload", c_size_t, (c_void_p,)),
        ("threechains_channel_frames_sent", ctypes.c_uint64, (c_void_p,)),
        ("threechains_node_options_init", None, (ctypes.POINTER(NodeOptions),)),
        ("threechains_node_create", _status,
         (c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(NodeOptions), _P)),
        ("threechains_node_bootstrap", _status,
         (c_void_p, c_char_p, ctypes.POINTER(NodeOptions), _P)),
        ("threechains_node_destroy", None, (c_void_p,)),
        ("threechains_node_rank", ctypes.c_int64, (c_void_p,)),
        ("threechains_node_ranks", ctypes.c_int64, (c_void_p,)),
        ("threechains_node_port", ctypes.c_uint16, (c_void_p,)),
        ("threechains_node_send", _status,
         (c_void_p, ctypes.c_int64, c_void_p, c_void_p, c_size_t)),
        ("threechains_node_poll", _status, (c_void_p, ctypes.POINTER(ctypes.c_uint))),
        ("threechains_node_barrier", _status, (c_void_p,)),
        ("threechains_node_close", _status, (c_void_p,)),
]:
    _declare(_name, _restype, *_args)
