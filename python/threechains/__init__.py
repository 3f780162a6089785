"""ThreeChains from Python: send ifuncs (code + payload) to a target process
and run them there, or be that target.

    import struct, threechains as tc
    worker = tc.Worker("tcp")
    channel = tc.Source(worker).connect("127.0.0.1", port, identity=tc.KeyPair.load("dev.key"))
    channel.send(tc.Ifunc.load("counter.tcc"), struct.pack("<Q", 5))
    channel.close()

A thin layer over the C API (<threechains/threechains.h>) through ctypes:
every handle is destroyed when its object is (or at close()), each C handle
keeps alive what it needs, and a failing call raises threechains.Error with the
library's message. Payloads are anything with the buffer protocol: bytes,
bytearray, memoryview, array.array, struct.pack's result, NumPy arrays."""

import ctypes
import enum

from . import _capi
from ._capi import lib

__all__ = ["Status", "Error", "Context", "Worker", "KeyPair", "PublicKey", "Trust", "Ifunc",
           "Receiver", "Source", "Channel", "Node", "version"]


class Status(enum.IntEnum):
    """threechains_status (the values of threechains::errc, and a few more)."""
    OK = 0
    BAD_MAGIC = 1
    BAD_VERSION = 2
    BAD_CODEC = 3
    TRUNCATED_FRAME = 4
    BAD_SEQUENCE = 5
    CODE_IDENTITY_MISMATCH = 6
    FRAME_TOO_LARGE = 7
    BAD_CONTAINER = 8
    NO_IMAGE_FOR_TARGET = 9
    JIT_FAILED = 10
    SYMBOL_NOT_FOUND = 11
    DEPENDENCY_NOT_FOUND = 12
    UNKNOWN_CODE = 13
    PROTOCOL = 14
    INVALID_ARGUMENT = 15
    PEER_GONE = 16
    TIMEOUT = 17
    IO = 18
    PEER_REFUSED = 19
    CODE_REFUSED = 20
    IMPORT_REFUSED = 21
    LIMIT_EXCEEDED = 22
    CODE_TRAPPED = 23
    GPU_FAILED = 24
    WOULD_BLOCK = 100
    UCX_ERROR = 200
    UNKNOWN_ERROR = 255


class Error(Exception):
    """A failed call: `status` says what kind of failure, str() the details."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            status = Status.UNKNOWN_ERROR
        super().__init__(message)
        self.status = status


def _check(status):
    if status != Status.OK:
        raise Error(status, lib.threechains_last_error().decode(errors="replace"))


def _make(create, *args):
    handle = ctypes.c_void_p()
    _check(create(*args, ctypes.byref(handle)))
    return handle


def version():
    return lib.threechains_version().decode()


class _Handle:
    """Owns one C handle; destroys it once (close(), `with`, or collection)."""
    _destroy = None

    def __init__(self, handle):
        self._handle = handle

    @property
    def handle(self):
        if not self._handle:
            raise Error(Status.INVALID_ARGUMENT, f"{type(self).__name__} is closed")
        return self._handle

    def _release(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            type(self)._destroy(handle)

    def __del__(self):
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._release()


def _payload(data):
    """(pointer, size, keep-alive) for any buffer; copies only read-only ones."""
    if data is None:
        return None, 0, None
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p), len(data), data
    view = memoryview(data)
    if not view.contiguous:
        raise Error(Status.INVALID_ARGUMENT, "the payload is not contiguous in memory")
    if view.readonly:
        copy = view.tobytes()
        return ctypes.cast(ctypes.c_char_p(copy), ctypes.c_void_p), len(copy), copy
    buffer = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return ctypes.cast(buffer, ctypes.c_void_p), view.nbytes, buffer


def _address(target_args, keep):
    """target_args as an address: None, an int, a ctypes object, or a writable
    buffer. What the address points into goes into `keep`: a buffer's export
    stays held (a bytearray cannot be resized and moved under C) as long as
    the object that keeps `keep`."""
    if target_args is None or isinstance(target_args, int):
        return target_args, 0  # a bare address: confined code gets it, and none of its bytes
    if isinstance(target_args, (ctypes._SimpleCData, ctypes.Structure, ctypes.Array)):
        keep.append(target_args)
        return ctypes.addressof(target_args), ctypes.sizeof(target_args)
    view = memoryview(target_args)
    if view.readonly:
        raise Error(Status.INVALID_ARGUMENT, "target_args must be writable")
    pinned = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    keep.append(pinned)
    return ctypes.addressof(pinned), view.nbytes


class Context(_Handle):
    """A UCX context: transport "shm", "tcp" or "any"."""
    _destroy = lib.threechains_context_destroy

    def __init__(self, transport="any"):
        super().__init__(_make(lib.threechains_context_create, transport.encode()))


class Worker(_Handle):
    """A UCX worker (single-threaded: use it from one thread)."""
    _destroy = lib.threechains_worker_destroy

    def __init__(self, context="any"):
        if isinstance(context, str):
            context = Context(context)
        super().__init__(_make(lib.threechains_worker_create, context.handle))

    def progress(self):
        return lib.threechains_worker_progress(self.handle)


class PublicKey(_Handle):
    _destroy = lib.threechains_public_key_destroy

    @classmethod
    def load(cls, path):
        return cls(_make(lib.threechains_public_key_load, str(path).encode()))


class KeyPair(_Handle):
    """An Ed25519 key pair (threechains-key generate writes its files)."""
    _destroy = lib.threechains_keypair_destroy

    @classmethod
    def load(cls, secret_path):
        return cls(_make(lib.threechains_keypair_load, str(secret_path).encode()))

    @classmethod
    def generate(cls):
        return cls(_make(lib.threechains_keypair_generate))

    @property
    def public_key(self):
        return PublicKey(_make(lib.threechains_keypair_public, self.handle))


class Trust(_Handle):
    """Who may connect to a Receiver and whose code it runs. Trust() refuses
    everyone; Trust.anyone() accepts all (development only)."""
    _destroy = lib.threechains_trust_destroy

    def __init__(self, peers=(), code_signers=(), native_code_signers=(), handle=None):
        super().__init__(handle or _make(lib.threechains_trust_create))
        for key in peers:
            self.allow_peer(key)
        for key in code_signers:
            self.allow_code_signer(key)
        for key in native_code_signers:
            self.allow_native_code_signer(key)

    @classmethod
    def anyone(cls):
        return cls(handle=_make(lib.threechains_trust_anyone))

    @staticmethod
    def _key(key):
        return key if isinstance(key, PublicKey) else PublicKey.load(key)

    # The key is held in a name until the call returns: a temporary would be
    # collected (and its C handle destroyed) before the call reads it.
    def allow_peer(self, key):
        key = self._key(key)
        _check(lib.threechains_trust_allow_peer(self.handle, key.handle))
        return self

    def allow_code_signer(self, key):
        """Code this key signed runs confined: bitcode only, checked."""
        key = self._key(key)
        _check(lib.threechains_trust_allow_code_signer(self.handle, key.handle))
        return self

    def allow_native_code_signer(self, key):
        """Code this key signed runs as it is, machine code included."""
        key = self._key(key)
        _check(lib.threechains_trust_allow_native_code_signer(self.handle, key.handle))
        return self


class Ifunc(_Handle):
    """An ifunc library: a code container (.tcc)."""
    _destroy = lib.threechains_ifunc_destroy

    @classmethod
    def load(cls, path):
        return cls(_make(lib.threechains_ifunc_load, str(path).encode()))

    @classmethod
    def from_bytes(cls, container):
        pointer, size, keep = _payload(container)
        ifunc = cls(_make(lib.threechains_ifunc_from_memory, pointer, size))
        del keep
        return ifunc

    @property
    def name(self):
        return lib.threechains_ifunc_name(self.handle).decode()

    @property
    def id(self):
        return lib.threechains_ifunc_id(self.handle)


def _receiver_options(struct, port, trust, identity, target_args, on_error, unrestricted_imports,
                      keep):
    struct.port = port
    struct.trust = trust.handle if trust is not None else None
    struct.identity = identity.handle if identity is not None else None
    struct.target_args, struct.target_args_bytes = _address(target_args, keep)
    struct.unrestricted_imports = 1 if unrestricted_imports else 0
    if on_error is not None:
        def report(_user, status, message):
            try:
                on_error(Error(status, message.decode(errors="replace")))
            except Exception:  # an exception must not unwind through C
                pass
        struct.on_error = _capi.ERROR_FN(report)
    keep.extend([trust, identity, struct.on_error])


def _helper_cpus(struct, helper_cpus, keep):
    if helper_cpus is None:
        return
    ids = [int(cpu) for cpu in helper_cpus]
    cpus = (ctypes.c_int * len(ids))(*ids)
    keep.append(cpus)
    struct.helper_cpus = ctypes.cast(cpus, ctypes.POINTER(ctypes.c_int))
    struct.helper_cpu_count = len(ids)


class Receiver(_Handle):
    """The target side: listens on `port` (0: the OS picks one; see .port) and
    runs each frame's ifunc with `target_args` as its third argument.

    trust: a Trust (default: refuse every peer). on_error(Error) hears of
    rejected frames and failed loads (default: printed to stderr).
    confined_time_budget_us, compile_time_limit_ms, compile_memory_limit,
    max_code_bytes_per_key: what confined code may cost (None: the default;
    docs/security.md, "What one frame can cost"). helper_cpus: the CPU ids
    the library's helpers run on (confined code's compile workers, the
    threads beside the one that serves); None leaves them where they start.
    A process bound to one core should name a spare one (docs/bindings.md)."""
    _destroy = lib.threechains_receiver_destroy

    def __init__(self, worker, trust=None, port=0, target_args=None, identity=None,
                 on_error=None, unrestricted_imports=False, gpu=None,
                 confined_time_budget_us=None, compile_time_limit_ms=None,
                 compile_memory_limit=None, max_code_bytes_per_key=None, helper_cpus=None):
        options = _capi.ReceiverOptions()
        lib.threechains_receiver_options_init(ctypes.byref(options))
        self._keep = []  # what C holds pointers to, alive as long as the receiver
        _receiver_options(options, port, trust, identity, target_args, on_error,
                          unrestricted_imports, self._keep)
        if gpu is not None:  # a CUDA device ordinal: GPU ifuncs run there (docs/gpu.md)
            options.gpu, options.gpu_device = 1, int(gpu)
        for field, value in (("confined_time_budget_us", confined_time_budget_us),
                             ("compile_time_limit_ms", compile_time_limit_ms),
                             ("compile_memory_limit", compile_memory_limit),
                             ("max_code_bytes_per_key", max_code_bytes_per_key)):
            if value is not None:
                setattr(options, field, int(value))
        _helper_cpus(options, helper_cpus, self._keep)
        super().__init__(_make(lib.threechains_receiver_create, worker.handle,
                               ctypes.byref(options)))

    @property
    def port(self):
        return lib.threechains_receiver_port(self.handle)

    def allocate_exposed(self, name, nbytes, writable=True):
        """Memory confined code may use, the window tier without a copy: `nbytes`
        of zeroed memory owned by this receiver (valid while it lives), as a
        ctypes byte array. Pass it to set_target_args so that confined code
        that needs no import runs in the window tier, near native speed; a
        target_args of your own keeps it in the checked tier (docs/security.md,
        "The window tier"). The array keeps this receiver alive; close() ends
        the memory with it, so use no view of it after close(). Not while
        start() serves."""
        address = ctypes.c_void_p()
        _check(lib.threechains_receiver_allocate_exposed(self.handle, name.encode(), nbytes,
                                                         1 if writable else 0,
                                                         ctypes.byref(address)))
        memory = (ctypes.c_ubyte * nbytes).from_address(address.value)
        memory._receiver = self  # the memory is the receiver's: it must not go first
        return memory

    def set_target_args(self, target_args):
        """Replaces target_args (as the constructor takes it); code loaded into
        windows loads again for the tier that reaches it. Set it before peers
        send code. Not while start() serves."""
        keep = []
        address, nbytes = _address(target_args, keep)
        _check(lib.threechains_receiver_set_target_args_sized(self.handle, address, nbytes))
        self._target_args_kept = keep  # what C points at now; the last one may go

    def allocate_device(self, name, nbytes):
        """Device memory GPU ifuncs see (Receiver(gpu=...)); its address on the GPU."""
        address = ctypes.c_void_p()
        _check(lib.threechains_receiver_allocate_device(self.handle, name.encode(), nbytes,
                                                        ctypes.byref(address)))
        return address.value

    def expose_device(self, name, address, nbytes):
        """Device memory of this process's own (cudaMalloc'd) that GPU ifuncs see."""
        _check(lib.threechains_receiver_expose_device(self.handle, name.encode(), address, nbytes))

    def copy_to_device(self, address, data):
        buffer = bytes(data)
        _check(lib.threechains_receiver_copy_to_device(self.handle, address, buffer, len(buffer)))

    def copy_from_device(self, address, nbytes):
        buffer = ctypes.create_string_buffer(nbytes)
        _check(lib.threechains_receiver_copy_from_device(self.handle, buffer, address, nbytes))
        return buffer.raw

    def poll(self):
        """Progresses once and runs what has arrived; returns the frames run."""
        ran = ctypes.c_uint()
        _check(lib.threechains_receiver_poll(self.handle, ctypes.byref(ran)))
        return ran.value

    def run(self, until):
        """Polls until `until()` is true."""
        while not until():
            self.poll()

    def start(self):
        """Serves on a thread of the library's own (ifuncs run there)."""
        _check(lib.threechains_receiver_start(self.handle))

    def stop(self):
        lib.threechains_receiver_stop(self.handle)

    @property
    def stats(self):
        stats = _capi.ReceiverStats()
        stats.size = ctypes.sizeof(stats)
        _check(lib.threechains_receiver_stats_get(self.handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name, _ in stats._fields_ if name != "size"}

    @property
    def ifunc_stats(self):
        """Per ifunc, most called first: a list of dicts (code, name, loaded, calls,
        payload_bytes, refusals, traps, timed_calls, timed_ns)."""
        count = ctypes.c_size_t()
        entry = ctypes.sizeof(_capi.IfuncStats)
        _check(lib.threechains_receiver_ifunc_stats(self.handle, None, 0, entry, ctypes.byref(count)))
        while True:
            room = count.value
            entries = (_capi.IfuncStats * max(room, 1))()
            _check(lib.threechains_receiver_ifunc_stats(self.handle, entries, room, entry,
                                                        ctypes.byref(count)))
            if count.value <= room:
                break
        out = []
        for e in entries[:count.value]:
            item = {name: getattr(e, name) for name, _ in e._fields_}
            item["name"] = e.name.decode(errors="replace")
            item["loaded"] = bool(e.loaded)
            item["in_window"] = bool(e.in_window)
            out.append(item)
        return out

    @property
    def peers(self):
        return lib.threechains_receiver_peers(self.handle)

    def close(self):
        self._release()
        self._keep = []


def _channel_options(struct, slots, slot_size, timeout_ms, identity, target_key):
    if slots is not None:
        struct.slots = slots
    if slot_size is not None:
        struct.slot_size = slot_size
    if timeout_ms is not None:
        struct.timeout_ms = timeout_ms
    struct.identity = identity.handle if identity is not None else None
    struct.target_key = target_key.handle if target_key is not None else None


class Channel(_Handle):
    """A connection to one Receiver (from Source.connect)."""
    _destroy = lib.threechains_channel_destroy

    def send(self, ifunc, payload=None):
        """Sends `ifunc` with a copy of `payload`; blocks while the ring is full."""
        pointer, size, keep = _payload(payload)
        _check(lib.threechains_channel_send(self.handle, ifunc.handle, pointer, size))
        del keep

    def try_send(self, ifunc, payload=None):
        """As send(), but returns False instead of waiting on a full ring."""
        pointer, size, keep = _payload(payload)
        status = lib.threechains_channel_try_send(self.handle, ifunc.handle, pointer, size)
        del keep
        if status == Status.WOULD_BLOCK:
            return False
        _check(status)
        return True

    def flush(self):
        """Waits until the target has run every frame sent so far."""
        _check(lib.threechains_channel_flush(self.handle))

    def progress(self):
        return lib.threechains_channel_progress(self.handle)

    @property
    def max_payload(self):
        return lib.threechains_channel_max_payload(self.handle)

    @property
    def frames_sent(self):
        return lib.threechains_channel_frames_sent(self.handle)

    def close(self):
        """Flushes, says goodbye, closes; raises if the target did not run every frame."""
        if not self._handle:
            return
        try:
            _check(lib.threechains_channel_close(self._handle))
        finally:
            self._release()


class Source(_Handle):
    """Opens Channels to Receivers from one Worker."""
    _destroy = lib.threechains_source_destroy

    def __init__(self, worker):
        super().__init__(_make(lib.threechains_source_create, worker.handle))

    def connect(self, host, port, identity=None, target_key=None, slots=None, slot_size=None,
                timeout_ms=None):
        options = _capi.ChannelOptions()
        lib.threechains_channel_options_init(ctypes.byref(options))
        _channel_options(options, slots, slot_size, timeout_ms, identity, target_key)
        return Channel(_make(lib.threechains_source_connect, self.handle, host.encode(), port,
                             ctypes.byref(options)))


class Node(_Handle):
    """One rank of a mesh. Node.bootstrap(worker) takes rank, size and every
    rank's address from the launcher that started the process (mpirun,
    srun --mpi=pmix): launcher "pmix", "mpi" or "auto"."""
    _destroy = lib.threechains_node_destroy

    @classmethod
    def bootstrap(cls, worker, launcher="auto", trust=None, identity=None, target_args=None,
                  on_error=None, exposed=None, helper_cpus=None):
        """exposed: {name: object} that injected code finds with
        threechains_lookup(name), exposed before the node connects.
        helper_cpus: as Receiver's (a rank bound to one core names a spare
        one for the helpers)."""
        options = _capi.NodeOptions()
        lib.threechains_node_options_init(ctypes.byref(options))
        keep = []
        if exposed:
            names = (ctypes.c_char_p * len(exposed))(*[name.encode() for name in exposed])
            objects = (ctypes.c_void_p * len(exposed))(*[_address(o, keep)[0] for o in exposed.values()])
            options.exposed_names = names
            options.exposed_objects = objects
            options.exposed_count = len(exposed)
            keep.extend([names, objects])
        receiver = _capi.ReceiverOptions()
        lib.threechains_receiver_options_init(ctypes.byref(receiver))
        _receiver_options(receiver, 0, trust, identity, target_args, on_error, False, keep)
        _helper_cpus(receiver, helper_cpus, keep)
        channel = _capi.ChannelOptions()
        lib.threechains_channel_options_init(ctypes.byref(channel))
        _channel_options(channel, None, None, None, identity, None)
        options.receiver = ctypes.pointer(receiver)
        options.channel = ctypes.pointer(channel)
        keep.extend([receiver, channel])
        node = cls(_make(lib.threechains_node_bootstrap, worker.handle, launcher.encode(),
                         ctypes.byref(options)))
        node._keep = keep
        return node

    @property
    def rank(self):
        return lib.threechains_node_rank(self.handle)

    @property
    def ranks(self):
        return lib.threechains_node_ranks(self.handle)

    def send(self, rank, ifunc, payload=None):
        pointer, size, keep = _payload(payload)
        _check(lib.threechains_node_send(self.handle, rank, ifunc.handle, pointer, size))
        del keep

    def poll(self):
        ran = ctypes.c_uint()
        _check(lib.threechains_node_poll(self.handle, ctypes.byref(ran)))
        return ran.value

    def barrier(self):
        """Serves until every rank has entered the barrier."""
        _check(lib.threechains_node_barrier(self.handle))

    def close(self):
        """Finishes queued sends and says goodbye to every rank. The node stays
        usable for barrier() (close, then a barrier, then let it go); it is
        freed when collected, or at the end of a `with` block."""
        if self._handle:
            _check(lib.threechains_node_close(self._handle))

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            self._release()
            self._keep = []
