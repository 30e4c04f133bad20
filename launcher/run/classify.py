"""Why an attempt died: a pure function of exit statuses, error texts, the log and OOM evidence.

Order of trust: the user's own signal to safe-sft and the watchdog; then each failed rank's own error
(torchelastic error.json, or its traceback in torchrun's summary); then specific patterns in the log;
then exit statuses (a signal) with the kernel's OOM evidence. Peers of a dead rank fail too (gloo
`Connection closed by peer`, NCCL watchdog, SIGTERM from torchrun), so a primary cause (OOM, user error,
crash) on any rank outranks a communication failure or a SIGTERM, whatever rank torchrun's summary calls
the root cause (launcher.plan.severity ranks them).

Every result says how well it is proven: `firm` when a line proves the kind, `thin` when only an exit
status does, with the runner-up kind. Text patterns are table rows (kind, regex), tried in the order of
`_PATTERNS`; an OOM is always tried first, so an OOM is never taken for a user error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from launcher.model import Confidence, Failure, FailureKind
from launcher.plan.severity import CONSEQUENCE, PRIMARY, SECONDARY, SIGKILLED, STOPPED, strength

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL"}
SIGNAL_NAMES |= {11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
NATIVE_CRASH_SIGNALS = {4, 6, 8, 11}

_RANK_PREFIX = re.compile(r"^\s*\[(?:default|rank)(\d+)\]:\s?")

# ---- the patterns ----------------------------------------------------------------------------------

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUDNN_STATUS_NOT_SUPPORTED|"
    r"CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|hipErrorOutOfMemory|NPU out of memory|"
    r"MPS backend out of memory|XPU out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|"
    r"out of memory on device|Out of memory error on GPU|ACL_ERROR_RT_MEMORY_ALLOCATION|"
    r"(?:NPU|Ascend).*(?:memory allocation failed|out of memory)|RESOURCE_EXHAUSTED: Out of memory|"
    r"error=2 : out of memory|cudaMalloc.*out of memory|error \(2\) : out of memory|"
    r"Cuda failure (?:\d+ )?'out of memory'|CUDA [Ee]rror 2[:,] out of memory|"  # code 2 (tinygrad, TF ops)
    r"Ran out of memory trying to allocate|"  # TensorFlow's BFC allocator, the GPU's
    r"OOM when allocating tensor(?!.*(?:device:CPU|allocator cpu))|"  # TensorFlow's op, on a GPU's allocator
    r"Ran out of memory in memory space hbm|Exceeded hbm capacity|"  # XLA's, a TPU's (or a GPU's) HBM
    # the occupancy map the BFC allocator logs only once an allocation has failed (its chunks in use `*`,
    # free `_`, the one that did not fit `x`), where the log was cut before its first words
    r"bfc_allocator\.cc:\d+\] [*_]{8,}x+\s*$|"
    r"Check failed: .*cudaSuccess.*out of memory|"  # a glog CHECK on a CUDA call (Caffe): error 2
    # vLLM's engine (an RL trainer's rollout) finding no GPU memory left for its KV cache as it starts
    r"No available memory for the cache blocks|larger than the available KV cache memory|"
    r"# GPU blocks: 0\b|"  # vLLM's count of KV-cache blocks left after the weights (older engines): none
    r"allocation failed with OOM on device"  # torch's caching allocator's own warning as it fails one
)
# Ray's memory monitor raises an OutOfMemoryError for host RAM.
_NOT_GPU_OOM = re.compile(r"ray\.exceptions\.OutOfMemoryError|running low on memory|memory pressure")
# An OOM that PyTorch itself reports inside a warning (FSDP's state_dict clone) still is one.
_MEMLOCK = (
    r"RLIMIT_MEMLOCK|RLIMIT_MLOCK|ulimit -l|max locked memory|cudaHostRegister|[Ff]ailed to register memory|"
    # a verbs registration's ENOMEM is the limit; its EINVAL (an unsupported buffer) is not
    r"ibv_reg_mr(?!\S*\s+failed with error (?!Cannot allocate memory))|"
    r"pin_memory.*(?:mlock|locked)|mlock\(\) failed|failed to mlock|cannot lock memory|"
    r"register(?:ation)? (?:failed|memory)|registeration failed|umem_reg|[Uu]nable to register memory|"
    r"[Ff]ailed to register|"
    # a verbs queue or region is pinned memory too: a verbs call's ENOMEM is the locked-memory limit (NCCL,
    # Open MPI, UCX: `ibv_create_cq(cqe=4096) failed: Cannot allocate memory`)
    r"ibv_\w+\S*\s+failed(?: with error|:)\s*Cannot allocate memory|[Ff]ailed to create a completion queue|"
    # libfabric's own ENOMEM (-FI_ENOMEM): its providers (EFA, verbs) post registered, i.e. locked, buffers
    r"Libfabric error: \(-12\)|"
    # a verbs library's own words for the same ENOMEM (mscclpp's `IbError`: `Ib failure: Cannot allocate memory`)
    r"\b(?:Ib|IB|ibverbs)\b[^\n]{0,40}Cannot allocate memory"
)
_OOM_IN_A_WARNING = re.compile(r"Tried to allocate|Error: CUDA out of memory")
# Where an OOM happened, read from the innermost frame of its traceback that names a phase.
_SAVE_FRAME = re.compile(
    r"_save_checkpoint|save_model|_save_optimizer_and_scheduler|save_pretrained|save_16bit_model|"
    r"\bsave_checkpoint\b|_zero3_consolidated_16bit_state_dict|consolidated_16bit_state_dict|"
    r"torch\.save|safe_save_file|_save_tp|save_state|_save_to_state_dict|[Ss]aving (?:model|checkpoint)|"
    r"[Ee]rror saving|savemodel|Failed to clone\(\) tensor|_full_post_state_dict_hook|state_dict\(\) call|"
    r"/save\.py\"|/saving\.py\"|checkpoint_engine|push_to_hub|merge_and_unload"
)
_LOAD_FRAME = re.compile(
    r"from_pretrained|get_model_tokenizer|deepspeed_init|deepspeed\.initialize|, in initialize\b|"
    r"init_model|build_model|model_init|load_from_state_dict|"
    r"_configure_distributed_model|_broadcast_model|_load_from_checkpoint|load_checkpoint|"
    r"_load_state_dict|load_state_dict_into|dispatch_model|prepare_model|_wrap_model|"
    r"_prepare_deepspeed|_prepare_one|\.to\(device|\bmodel\.to\(|\.cuda\(\)|Init\.__init__|"
    r"_post_init_method|_convert_to_deepspeed_param|init_process_group|load_model|_load_pretrained_model|"
    r"torch\.load|_cuda_deserialize|load_state_dict|\.restore\(|, in restore\b|, in load\b|"
    r"[Rr]estoring checkpoint|[Ll]oading checkpoint|, in _apply\b|materiali[sz]e|lazy_init|to_empty|"
    r"_load_rng_state|_load_optimizer_and_scheduler|"
    r"modules/module\.py\", line \d+, in convert\b|"  # Module.to's own mover: a model's tensors going to a device
    # zero.Init's stand-in for torch.empty and its kin: installed only while a model is built under it
    r"zero/partition_parameters\.py\", line \d+, in wrapped_fn\b|"
    r"nn/modules/\w+\.py\", line \d+, in (?:__init__|reset_parameters)\b|"  # a layer built on the GPU
    r"_initialize_kv_caches|check_enough_kv_cache_memory|determine_available_memory|"  # vLLM's engine start
    r"raise_if_cache_size_invalid|No available memory for the cache blocks|# GPU blocks: 0\b|"  # (its words)
    # a trainer's constructor: it places the model on its device (transformers' Trainer, its subclasses)
    r"trainer\w*\.py\", line \d+, in __init__\b|_move_model_to_device"
)
# an engine's set-up that runs a step or a forward of its own (DeepSpeed's ZeRO optimizer making its states,
# vLLM profiling its memory): an OOM in that step is the set-up's, before any training step
_SETUP_FRAME = re.compile(
    r"initialize_optimizer_states|_configure_zero_optimizer|deepspeed\.initialize|deepspeed_init\b|"
    r"determine_available_memory|profile_run|_initialize_kv_caches"
)
_STEP_FRAME = re.compile(
    r"training_step|compute_loss|\bbackward\b|_inner_training_loop|optimizer\.step|\bstep\(|_take_model_step|"
    r"train_step|forward_backward|\btrain\(|_run_epoch|"
    r"\bforward\b|_maybe_log_save_evaluate"
)
# evaluation frames (transformers', swift's, Lightning's, a script's own `evaluate`/`validate`/`test`): an
# OOM there is the eval batch's (per_device_eval_batch_size)
_EVAL_FRAME = re.compile(
    r"\bin _{0,2}(?:evaluat\w*|eval|eval_\w+|validat\w*|val|val_step|valid|valid_\w+|test|test_\w+|predict\w*|"
    r"prediction_\w+|"
    r"torch_pad_and_concatenate|numpy_pad_and_concatenate|nested_concat)$"  # transformers' eval loop gathering outputs
)
# a progress bar whose own name (before its first percentage) is an evaluation's: Lightning's "Validation
# DataLoader 0:  3%|", catalyst's "Epoch (valid):  3%", tqdm's "Evaluating:  3%|" (a training bar's postfix
# may say val_loss: only the name counts)
_EVAL_PROGRESS = re.compile(
    r"^[^%|]{0,80}?\b(?i:valid(?:ation)?|val|eval(?:uat\w*)?|test(?:ing)?|predict\w*)\b[^%|]{0,40}?\d{1,3}(?:\.\d+)?%"
)
_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+, in \S+|\S+\.py:\d+ in \w+|^\s*\S+ at \S+\.py:\d+|^\s*at \S+')
# IPython's (Jupyter's) frames: `File /x/trainer.py:2113, in Trainer.evaluate(self, ...)`, and before IPython 8
# `/x/request.py in do_open(self, ...)`; read as Python's own frame line
# IPython prints a frame's source lines around the call, numbered; the call's own is marked `--> 619`
_IPYTHON_CONTEXT = re.compile(r"^\s*\d+ {2,}\S")
# (Colab copies the path as a markdown link: `[/x/trainer_pt_utils.py](https://localhost:8080/#) in f(...)`)
_IPYTHON_FRAME = re.compile(
    r"^\s*(?:File )?\[?(?P<path>[^\s\[\]]+\.py)(?:\]\([^)\s]*\))?(?::(?P<line>\d+),)? in (?:\w+\.)*(?P<func>\w+)\("
)

_HOST_ALLOC = re.compile(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|std::bad_alloc|\bMemoryError\b|"
    r"Cannot allocate memory|not enough memory: you tried to allocate|ENOMEM|memory allocation of \d+ bytes failed|"
    r"running low on memory|killed due to memory pressure|low on resource: memory|"  # the last: a kubelet's eviction
    r"ray-oom-prevention|RAY_memory_usage_threshold|"  # Ray's memory monitor's advice, the tail of its kill notice
    r"after using all available RAM"  # a notebook runtime's (Colab's) end of a session
)
# A web request that failed for the network's or the server's reason (a 4xx other than 429 is the user's:
# a wrong id, a gated repo). Either a failure only HTTP clients raise, or a network failure on a line that
# names a web request (a URL, a connection pool, a hub's or an HTTP client's exception), so that a rank's
# `Connection reset by peer` or an unresolvable MASTER_ADDR stays a communication failure.
_HTTP_ONLY_FAILURE = (
    r"We couldn't connect to '?https?://|Couldn't reach |ChunkedEncodingError|IncompleteRead|Connection broken:|"
    r"Consistency check failed: file should be of size|urlopen error|"
    # an HTTP client's own exception class with a server's or a rate limit's status (a 4xx is the user's)
    r"\bHTTPError\b.*(?:\b5\d\d\b|\b429\b|Service Unavailable|Bad Gateway|Gateway Time-?out|Too Many Requests|"
    r"Internal Server Error)|"
    r"httpx\.(?:ConnectError|ConnectTimeout|ReadTimeout|ReadError|WriteError|RemoteProtocolError|ProxyError|PoolTimeout)|"
    r"httpcore\.\w+(?:Error|Timeout)|ClientConnectorError|ServerDisconnectedError|ClientPayloadError|"
    r"Cannot connect to host|(?<!Dist)NetworkError: \[E\d+\] Connection|too many \d+ error responses|"
    # modelscope_hub's own (ms-swift 4's hub client), its message often in Chinese: a timeout, the download's
    # deadline or floor speed, a server error, a rate limit, each with its E10xx code
    r"\b_?Download(?:Deadline|TooSlow|Deferred)Error\b|(?:RequestTimeout|RateLimit|Server)Error: \[E10\d\d\]"
)
_WEB_REQUEST = (
    r"https?://|HTTPS?Connection|\bhost='|huggingface\.co|hf-mirror|modelscope|\b[Hh]ub\b|LocalEntryNotFoundError|"
    r"HfHubHTTPError|requests\.exceptions|urllib3\.exceptions|httpx\.|httpcore\.|aiohttp\.|fsspec"
)
_NETWORK_FAILURE = (
    r"ConnectionError|ConnectError|ConnectTimeout|ReadTimeout|[Tt]imed? ?out|MaxRetryError|Max retries exceeded|"
    r"NewConnectionError|Failed to establish a new connection|ProxyError|SSLError|SSL: |SSLEOFError|"
    r"EOF occurred in violation|Connection (?:refused|reset|aborted)|RemoteDisconnected|Name or service not known|"
    r"Temporary failure in name resolution|nodename nor servname|getaddrinfo failed|No route to host|"
    r"Network is unreachable|\b5\d\d Server Error|\b429 Client Error|Too Many Requests|Service Unavailable|"
    r"Bad Gateway|Gateway Time-?out|check your (?:internet )?connection|[Ii]nternet connection"
)
_DOWNLOAD = re.compile(rf"{_HTTP_ONLY_FAILURE}|^(?=.*(?:{_WEB_REQUEST})).*(?:{_NETWORK_FAILURE})")
# What HTTP clients print outside an exception's line (a pasted message, a wrapped traceback); their retry
# warnings are not failures.
_DOWNLOAD_PHRASE = (
    r"Max retries exceeded with url|Failed to establish a new connection|\b5\d\d Server Error: .* for (?i:url)|"
    r"429 Client Error: Too Many Requests|Read timed out\. \(read timeout|Connection broken: |"
    r"Consistency check failed: file should be of size|We couldn't connect to '?https?://|Couldn't reach "
)
_RETRY_NOTICE = r"thrown while requesting|Retrying|\[Retry \d|[Rr]etry(?:ing)? in \d|will retry"
# A socket's own error (a refused connection, a timeout, a failed name lookup) raised inside an HTTP client
_SOCKET_FAILURE = (
    r"gaierror|Connection(?:Refused|Reset|Aborted)Error|\bTimeoutError|socket\.timeout|"
    r"OSError: \[Errno (?:101|104|110|111|113)\]"
)
_HTTP_CLIENT_FRAME = re.compile(
    r"[/\\](?:urllib3|requests|httpx|httpcore|aiohttp|huggingface_hub|modelscope_hub)[/\\]|"
    r"[/\\]modelscope[/\\]hub[/\\]|[/\\]http[/\\]client\.py|[/\\]urllib[/\\]request\.py"
)

_EXCEPTION_LINE = re.compile(
    r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b(?::|$)|\w+(?:Error|Exception)\b:|"
    # IPython's (Jupyter's) traceback names its exception first: `KeyError    Traceback (most recent call last)`
    r"^\s*\w*(?:Error|Exception|Interrupt|Exit)\s+Traceback \(most recent call last\)|"
    r"^\s*(?:[a-z_]\w*\.)+[A-Z]\w+: |^\s*socket\.(?:gaierror|herror|timeout)\b:|"
    r"^\s*[A-Z]\w*Warning: "  # a warning raised (-W error, PYTHONWARNINGS=error); one shown starts with its file
)


@dataclass(frozen=True)
class _Pattern:
    kind: FailureKind
    regex: re.Pattern[str]
    exception_only: bool = False  # counts only on an exception's message line, not on log or warning lines
    exclude: re.Pattern[str] | None = None  # lines that look like this kind but are another's
    warning_ok: re.Pattern[str] | None = None  # a warning line counts where it also matches this
    raised_in: re.Pattern[str] | None = None  # counts only where a frame of the line's traceback matches this


def _p(kind: FailureKind, pattern: str, exception_only: bool = False, exclude: str | None = None) -> _Pattern:
    return _Pattern(kind, re.compile(pattern), exception_only, re.compile(exclude) if exclude else None)


# Windows' exit status of a native fault (NTSTATUS, unsigned or signed): an access violation, a stack overflow,
# a fail-fast abort
_WINDOWS_FAULT = r"exit (?:status|code):? (?:3221225477|-1073741819|3221225725|-1073741571|3221226505|-1073740791)\b"
_NCCL_TERMINATE = r"terminate called after throwing.*(?:DistBackendError|NCCL|c10::Error|gloo)"
# A FATAL-level log line, after which the library aborts (glog's `F0423 20:35:34.618070 1234 x.cc:9]`,
# TensorFlow's and XLA's `2025-04-23 20:35:34.618070: F x.cc:9]`), and a native backtrace's frames of an abort
_NATIVE_ABORT = (
    r"^F\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] |\d: F \S+\.(?:cc|h):\d+\] |"
    r"\(abort\+0x[0-9a-f]+\)|__verbose_terminate_handler"
)


_PATTERNS: tuple[_Pattern, ...] = (
    _p(
        FailureKind.MEMLOCK,
        _MEMLOCK,
    ),
    _p(
        FailureKind.SHM,
        r"/dev/shm.*(?:No space left|too small|failed|[Bb]us error)|No space left on device.*shm|"
        r"shm\.h.*No space left on device|posix_fallocate failed|"
        r"is killed by signal: Bus error|unable to write to file </torch_|failed to extend /dev/shm|"
        r"insufficient shared memory|[Ee]rror while creating shared.?memory segment|"
        r"unable to allocate shared memory|shm_open|NCCL_SHM|unable to mmap \d+ bytes from file </torch_|"
        r"Bus error \(core dumped\)|shared memory \(shm\) limit|"
        r"Unexpected bus error encountered in worker",  # DataLoader's own words, its shm hint cut or not
    ),
    # a semaphore or a shared block that Python's multiprocessing makes in /dev/shm: its full tmpfs's ENOSPC
    # names no path (a DataLoader's workers' Event, a dataset's map with num_proc)
    _Pattern(
        FailureKind.SHM,
        re.compile(r"No space left on device"),
        exception_only=True,
        raised_in=re.compile(r"multiprocess(?:ing)?/(?:synchronize|shared_memory|heap)\.py|/dev/shm"),
    ),
    # The system's own words first: torch's writer reports the same full disk as a short write, and its
    # line (`unexpected pos 368960 vs 368848`) says less to a user than `[Errno 28] No space left on device`.
    _p(
        FailureKind.DISK_FULL,
        r"No space left on device|\[Errno 28\]|Errno 122|[Dd]isk quota exceeded|ENOSPC|"
        r"Not enough disk space\. Needed:|"  # datasets' check before it downloads and prepares
        r"There is not enough space on the disk",  # Windows' ERROR_DISK_FULL, as Python and libraries word it
    ),
    # the kubelet evicting a pod over its disk limit: the same limit stops a retry
    _p(FailureKind.DISK_FULL, r"ephemeral local storage usage exceeds|low on resource: ephemeral-storage"),
    _p(FailureKind.DISK_FULL, r"PytorchStreamWriter failed writing file|file write failed|unexpected pos \d+ vs \d+"),
    # Offline mode with the files not cached: a setting to change, though the hub's message reads like a
    # lost connection (transformers wraps it in "We couldn't connect to 'https://huggingface.co'").
    _p(
        FailureKind.USER_ERROR,
        r"outgoing traffic has been disabled|Offline mode is enabled|OfflineModeIsEnabled",
        exception_only=True,
    ),
    _Pattern(FailureKind.DOWNLOAD, _DOWNLOAD, exception_only=True),
    _p(FailureKind.DOWNLOAD, _DOWNLOAD_PHRASE, exclude=_RETRY_NOTICE),
    _Pattern(FailureKind.DOWNLOAD, re.compile(_SOCKET_FAILURE), exception_only=True, raised_in=_HTTP_CLIENT_FRAME),
    _p(
        FailureKind.USER_ERROR,
        r"remaining_argv|error: argument|unrecognized arguments|error: the following arguments are required|"
        r"FileNotFoundError|No such file or directory|DatasetNotFoundError|DatasetGenerationError|"
        r"RepositoryNotFoundError|GatedRepoError|access a gated repo|EntryNotFoundError|LocalEntryNotFoundError|"
        r"RevisionNotFoundError|HFValidationError|Repo id must|is not a valid model identifier|"
        r"is not a local folder|does not appear to have (?:a )?file|does not appear to have any of|"
        r"Can't load (?:tokenizer|the configuration|config)|Unrecognized (?:model|configuration class)|"
        r"model_type .* not recognized|not found in (?:registry|MODEL_MAPPING)|404 Client Error|"
        r"401 Client Error|403 Client Error|ModuleNotFoundError|ImportError|undefined symbol|"
        r"cannot import name|No module named|requires the .* library|pip install|"
        r"JSONDecodeError|UnicodeDecodeError|ArrowInvalid|ArrowTypeError|KeyError|TypeError|AttributeError|NameError|"
        r"ZeroDivisionError|"  # swift's sample_dataset divides by a dataset's rows: a file none of whose rows it reads
        r"BatchNotAppliedError|"  # safe-sft's worker: a script's own DataLoader keeps its batch (launcher/hf_worker.py)
        r"SyntaxError|IndentationError|NotImplementedError|yaml\.\w+Error|ScannerError|ParserError|"
        r"Address already in use|EADDRINUSE|No CUDA GPUs are available|Found no NVIDIA driver|"
        r"CUDA driver version is insufficient|no kernel image is available|not compiled with CUDA|"
        r"Torch not compiled|AssertionError: (?:Either train_batch_size|Check batch related parameters)|"
        r"ValueError|AssertionError|HfArgumentParser|(?:Template|template) .*not|Unknown template|"
        r"PermissionError|Permission denied|IsADirectoryError|NotADirectoryError|FileExistsError|"
        # the machine's own limits, which a retry meets again: a read-only path, the open-files and thread limits
        r"Read-only file system|Too many open files|can't start new thread|pthread_create failed|"
        r"PackageNotFoundError|distribution was not found|"  # a package the code requires is not installed
        r"DeepSpeed is not compatible with device_map|Please (?:install|set|use|specify|check|pass)|"
        r"is not supported|are not supported|not supported (?:by|for|in|with)|must be (?:one of|a|an|in)|"
        r"should be (?:one of|a|an)|does not exist|doesn't exist|not exist|invalid (?:argument|value|literal)|"
        r"Invalid (?:argument|value|model|dataset|config)|got an unexpected keyword argument|"
        r"missing \d+ required positional argument|list index out of range|index out of range|"
        r"size mismatch for|shape mismatch|Expected .* but got|out of bounds|no file named|Failed to import|"
        r"[Cc]annot find|[Cc]ould not find|[Cc]an't find|data format|only supports?\b|"
        r"Error\(s\) in loading state_dict|SafetensorError|"  # a weights file cut short or damaged: fetch it again
        r"^[A-Z]\w*Warning: ",  # a warning raised as an error: -W error or PYTHONWARNINGS=error, the user's setting
        exception_only=True,
        exclude=r"CUDA (?:driver )?error|CUDA_ERROR|cuda runtime error|cudaError|NCCL|HCCL|[Tt]imed out|Timeout\(ms\)",
    ),
    # What a command line, a launcher or a scheduler refuses: the user's to fix, whatever line it is on.
    _p(
        FailureKind.USER_ERROR,
        r"error: unrecognized arguments|error: argument|error: the following arguments are required|"
        r"error: invalid choice|remaining_argv|Batch job submission failed|Invalid account|invalid partition|"
        r"Unable to allocate resources|Unable to create step|Invalid generic resource|Invalid (?:gres|qos)|"
        r"validation errors? for|ValidationError|MisconfigurationException|"
        r"Extra inputs are not permitted|\[type=\w+, input_value=|"  # pydantic's (v2) words for a config it refused
        r"ConfigurationError|You requested gpu|"
        r"DDP expects same model across all ranks|"  # the nodes were given different models
        r"The server socket has failed to (?:listen|bind)|errno: 98\b|Errno 98\b|"
        r"Address already in use|EADDRINUSE|Failed to load JSON|JSON parse error|Cannot access gated repo|"
        r"(?:Authentication|PermissionDenied|NotExist)Error: \[E30\d\d\]",  # modelscope_hub: a token, access, an id
    ),
    _p(
        FailureKind.CUDA_ERROR,
        r"CUDA (?:driver )?error: (?!out of memory)|CUBLAS_STATUS_(?!ALLOC_FAILED)|CUDNN_STATUS_(?!NOT_SUPPORTED)|"
        r"device-side assert|illegal memory access|unspecified launch failure|NVML_SUCCESS == r INTERNAL ASSERT|"
        r"Xid[: ]|uncorrectable ECC error|CUDA_ERROR_(?!OUT_OF_MEMORY)|cudaError(?!MemoryAllocation)|"
        r"misaligned address|HIP error|hipError(?!OutOfMemory)|CUDA kernel errors|an illegal instruction was|"
        r"GPU is lost|fell off the bus|fallen off the bus|ECC error|Assertion .+ failed|kernel execution error|"
        # a CUDA error raised where Python cannot take it (a destructor, a C++ thread): the abort is its sequel
        r"terminate called after throwing an instance of 'c10::CUDAError'|"
        r"\bCUresult error\b|"  # a driver API call's failed status, as extensions report it
        r"THCudaCheck FAIL(?!.*out of memory)",  # PyTorch 1.x's report of a CUDA call's error (error=2 is an OOM)
    ),
    _p(
        FailureKind.CRASH,
        r"[Ss]egmentation fault|SIGSEGV|\b[Ss]egfault(?:ed)?\b|core dumped|Fatal Python error|Aborted \(core|"
        r"terminate called (?:after throwing|without an active exception)|free\(\): invalid|"
        r"double free or corruption|corrupted size vs\. prev_size|Illegal instruction|SIGABRT|"
        r"Floating point exception|stack smashing detected|malloc\(\): |"
        r"Error .+ at line \d+ in file /|"  # a native extension's own error report
        r"\*\*\* Check failure stack trace: \*\*\*|"  # glog's (absl's) fatal CHECK: the process aborts
        r"Unhandled exception: \S+ what\(\):|"  # a C++ exception nothing caught (Ray's core logs it): an abort
        r"\*\*\* End of error message \*\*\*|"  # the end of Open MPI's report of a process's fatal signal
        + _WINDOWS_FAULT
        + "|"
        + _NATIVE_ABORT,
        exclude=_NCCL_TERMINATE
        + r"|could be caused by|may be caused by|might be caused by|potential root causes|common causes include|"
        r"c10::CUDAError",
    ),
    _p(
        FailureKind.COMM_TIMEOUT,
        r"[Ww]atchdog caught collective operation timeout|Timeout\(ms\)=\d+|[Tt]imed out after|"
        r"Socket Timeout|DistStoreError: .*[Tt]ime ?out|NCCL.*[Tt]imeout|wait timeout after|"
        r"collective operation timeout|HCCL.*(?:timeout|time out)|[Tt]imeout waiting for|"
        r"RendezvousTimeoutError|Connection timed out|timed out waiting|heartbeat monitor|"
        r"TimeoutError|operation timed out|[Tt]imed out\b|\btimes out\b|EI0002|HCCL_EXEC_TIMEOUT|\[task timeout\]|"
        r"[Ss]ynchronize timeout|EE1002",
        # NCCL's generic notice, printed for errors too; a web request's timeout is a download's
        # and a collective's own error (`WorkNCCL(..., Timeout(ms)=600000) raised the following async exception:
        # NCCL error: remote process exited`), whose description names the timeout it did not reach
        exclude=rf"have failed or timed out|\bnot (?:yet )?timed out|n't timed out|{_DOWNLOAD.pattern}|"
        r"raised the following async exception: (?!.*(?:[Tt]imed out|[Tt]imeout\b|before timing out))",
    ),
    _p(
        FailureKind.COMM_ERROR,
        r"Connection closed by peer|Connection reset by peer|ncclSystemError|ncclInternalError|"
        r"ncclRemoteError|ncclUnhandledCudaError|ncclInvalidUsage|NCCL error|DistNetworkError|"
        r"RendezvousConnectionError|RendezvousClosedError|Broken pipe|Gloo connectFullMesh failed|"
        r"ProcessGroupGloo.*failed|DistBackendError|Connection refused|NCCL WARN|HCCL.*(?:error|fail)|"
        r"RCCL.*error|unhandled system error|socketStartConnect|ProcessGroupNCCL.*(?:error|Error)|"
        r"Failed to recv|Failed to send|connect\(\) failed|Network is unreachable|No route to host|"
        r"RuntimeError: \[\.\./third_party/gloo|NCCL failure|unhandled cuda error|"
        r"NCCL communicator was aborted",  # torch's own abort of a communicator: a peer or its watchdog gave up
        exclude=_DOWNLOAD.pattern,  # a web request's lost network (an HTTP client's retry notice) is a download's
    ),
    # Python's, Julia's, and a terminal's echo of Ctrl-C at a line's start (what printed next may follow it)
    _p(
        FailureKind.INTERRUPTED,
        r"^\s*KeyboardInterrupt\b|KeyboardInterrupt$|\bInterruptException\b|^\s*\^C(?![a-z])|"
        r"\b(?:CRITICAL|ERROR|WARNING|INFO)\b.*\b[Kk]eyboard [Ii]nterrupt\b",  # a program's own log of its Ctrl-C
    ),
    # Lightning catches the Ctrl-C and says so in a warning of its own, then shuts down without a traceback
    _Pattern(
        FailureKind.INTERRUPTED,
        re.compile(r"Detected KeyboardInterrupt"),
        warning_ok=re.compile(r"Detected KeyboardInterrupt, attempting graceful shutdown"),
    ),
    # Last: an HTTP client's retry warnings, where nothing else failed, are the failure (the log ends there)
    _Pattern(FailureKind.DOWNLOAD, re.compile(rf"^(?=.*(?:{_RETRY_NOTICE})).*?(?:{_DOWNLOAD.pattern})")),
    _p(
        FailureKind.KILLED,
        r"will be terminated soon|pod-termination|[Pp]reempted by|instance (?:is being )?preempted|"
        r"spot (?:instance )?interruption|[Ee]victed",
    ),
    # Where nothing else failed: torch's warning that it has no kernels for this GPU. Its first kernel then
    # fails with `no kernel image is available`, a set-up a retry does not fix (a torch built for the GPU does).
    _Pattern(
        FailureKind.USER_ERROR,
        re.compile(r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation"),
        warning_ok=re.compile(r"is not compatible with the current PyTorch installation"),
    ),
)
_NCCL_TERMINATE_LINE = re.compile(_NCCL_TERMINATE)
# The launcher itself was signalled: torchrun's agent, DeepSpeed's launcher, or a Python launcher's Ctrl-C
# (groups: the signal's name or number, torchrun's number, KeyboardInterrupt). In a saved log it is the
# user's or a scheduler's stop (launcher_output's `stopped_by`); live, safe-sft knows its own signals, and a
# torchrun that someone else signalled is `killed`.
LAUNCHER_SIGNAL = re.compile(
    r"Received (?:Signals\.)?(SIG[A-Z]+|\d+) death signal|SignalException: Process \d+ got sig(?:nal|val): ?(\d+)|"
    r"^\s*(KeyboardInterrupt)\b"
)

# Lines that can be evidence at all: warnings that merely mention a path or a feature don't count.
_ERROR_LINE = re.compile(
    r"Error|Exception|error:|ERROR|Traceback|Signal \d+|NCCL WARN|out of memory|Killed|Segmentation|fault|"
    r"terminate called|Aborted|Timeout|timeout|timed out|[Ff]ailed|Interrupt|No space left|Bus error|"
    r"Permission denied|Cannot allocate|corruption|Xid|\berror\b|segmentation fault|NVRM|fallen off|times out|"
    r"No route to host|"  # NCCL's retries of a connect, logged at INFO, are all a worker cut off says
    r"bfc_allocator\.cc:\d+\] [*_]{8,}x|"  # TensorFlow's map of a failed allocation
    r"failure|unexpected pos|memory pressure|\bOOM\b|in use|[Tt]erminat|Cannot access gated repo|"
    r"core dumped|Illegal instruction|Floating point exception|"  # a shell's words for a process a signal ended
    r"free\(\): |malloc\(\): |"  # glibc's heap checks, which abort the process
    r"[Ee]victed|low on resource|ephemeral local storage usage exceeds|"  # a kubelet's
    r"^\s*\^C(?![a-z])|is not compatible with the current PyTorch installation|all available RAM|"
    r"# GPU blocks: 0\b|" + _WINDOWS_FAULT + "|" + _NATIVE_ABORT
)
_WARNING_LINE = re.compile(
    r"\b(?:WARNING|UserWarning|FutureWarning|DeprecationWarning|warnings\.warn)\b|(?<!NCCL )\bWARN\b"
)


@dataclass(frozen=True)
class RankFailure:
    """One failed rank as torchrun, a launcher line or its error file reported it."""

    rank: int | None
    exit_code: int | None  # negative: killed by that signal
    message: str = ""  # the traceback or error text of that rank, if any
    timestamp: float | None = None


@dataclass(frozen=True)
class AttemptEvidence:
    exit_code: int | None  # torchrun's (or swift's) exit code; negative: a signal
    rank_failures: tuple[RankFailure, ...] = ()
    log_tail: tuple[str, ...] = ()
    kernel_oom: tuple[str, ...] = ()  # lines proving a kernel OOM kill happened during the attempt
    kernel_checked: bool = True  # False: nobody read the kernel's OOM counter (a saved log), so no proof of none
    interrupted_by: str | None = None  # SIGINT/SIGTERM/SIGHUP that the user or scheduler sent safe-sft
    interrupted_at: float | None = None  # when safe-sft received it (epoch seconds, as torchrun's `time`)
    stopped_by: str | None = None  # a log's word that the launcher was signalled or the job cancelled
    hang: str | None = None  # the watchdog's finding
    hang_cause: str | None = None  # what the hung ranks' stacks show caused it (launcher.run.diagnose)
    steps_seen: bool = False  # training steps were logged in this attempt


@dataclass(frozen=True)
class _Found:
    kind: FailureKind
    lines: tuple[str, ...]
    rank: int | None = None
    confidence: Confidence = Confidence.FIRM
    runner_up: FailureKind | None = None


def _rank_of(line: str) -> int | None:
    match = _RANK_PREFIX.match(line)
    return int(match.group(1)) if match else None


def _clean(line: str) -> str:
    return _RANK_PREFIX.sub("", line, count=1).strip()


def _is_eval(text: str) -> bool:
    return bool(_EVAL_FRAME.search(text) or _EVAL_PROGRESS.search(text))


def _frame_text(line: str) -> str:
    """A log line without its rank prefix, an IPython frame written as Python writes its frames."""
    text = _clean(line)
    found = _IPYTHON_FRAME.match(text)
    return f'File "{found["path"]}", line {found["line"] or 0}, in {found["func"]}' if found else text


def _frame_phase(line: str) -> FailureKind | None:
    text = _frame_text(line)
    if _IPYTHON_CONTEXT.match(text):  # a line around the call, not the call: `623     skip_save_model=...`
        return None
    if _SAVE_FRAME.search(text):
        return FailureKind.CUDA_OOM_SAVE
    if _is_eval(text):
        return FailureKind.CUDA_OOM_EVAL
    if _LOAD_FRAME.search(text):
        return FailureKind.CUDA_OOM_LOAD
    if _STEP_FRAME.search(text):
        return FailureKind.CUDA_OOM
    return None


def _oom_phase(lines: Sequence[str], at: int, steps_seen: bool) -> tuple[FailureKind, str | None]:
    """The phase of the OOM on line `at`, from the innermost frame of its traceback that names one."""
    rank = _rank_of(lines[at])
    start = max(0, at - 400)
    frames: list[str] = []
    header = None
    for index in range(at - 1, start - 1, -1):
        line = lines[index]
        if rank is not None and _rank_of(line) not in (rank, None):
            continue
        if "Traceback (most recent call last)" in line:
            header = index
            break
        if _FRAME_LINE.match(_frame_text(line)) or _SAVE_FRAME.search(line) or _LOAD_FRAME.search(line):
            frames.append(line)
    logged_before = [line for line in lines[max(0, at - 3) : at][::-1] if not _WARNING_LINE.search(line)]
    frames[:0] = [lines[at], *logged_before]  # the OOM line and what was logged just before
    if not any(_frame_phase(frame) for frame in frames):
        frames += _traceback_after(lines, at, rank)[::-1]  # an allocator's message printed before its traceback
    if header is not None:  # outermost: the progress bar the traceback cut short (its frames may be elided)
        frames += [line for line in lines[max(0, header - 2) : header] if _EVAL_PROGRESS.search(_clean(line))]
    for position, frame in enumerate(frames):  # innermost first
        phase = _frame_phase(frame)
        if phase is None:
            continue
        if phase is FailureKind.CUDA_OOM:  # a forward or a loss: evaluation runs them too, inside its own frames
            outer = next((f for f in frames[position + 1 :] if _is_eval(_frame_text(f))), None)
            if outer is not None:
                return FailureKind.CUDA_OOM_EVAL, _clean(outer)
            # and so does an engine's set-up: ZeRO's first optimizer step that makes its states, vLLM's profile run
            outer = next((f for f in frames[position + 1 :] if _SETUP_FRAME.search(_frame_text(f))), None)
            if outer is not None:
                return FailureKind.CUDA_OOM_LOAD, _clean(outer)
        return phase, _clean(frame)
    if rank is not None:  # this rank printed no frames: its peers' tracebacks show the phase they all were in
        return _oom_phase([_clean(line) for line in lines], at, steps_seen)
    return FailureKind.CUDA_OOM, None


_GPU_OOM = _Pattern(FailureKind.CUDA_OOM, _OOM, exclude=_NOT_GPU_OOM)
_GPU_OOM_WARNING = _Pattern(FailureKind.CUDA_OOM, _OOM, exclude=_NOT_GPU_OOM, warning_ok=_OOM_IN_A_WARNING)
_HOST = _Pattern(FailureKind.HOST_OOM, _HOST_ALLOC, exclude=re.compile(_MEMLOCK))


def _traceback_after(lines: Sequence[str], at: int, rank: int | None) -> list[str]:
    """The frames of a traceback that starts right after line `at` (up to its exception line)."""
    frames: list[str] = []
    for line in lines[at + 1 : at + 400]:
        if rank is not None and _rank_of(line) not in (rank, None):
            continue
        text = _clean(line)
        if _FRAME_LINE.match(_frame_text(line)) or _SAVE_FRAME.search(text) or _LOAD_FRAME.search(text):
            frames.append(line)
        elif _EXCEPTION_LINE.search(text):
            break
    return frames


def _frames_above(lines: Sequence[str], at: int) -> list[str]:
    """The frames of the traceback whose exception is line `at` (back to its `Traceback` line)."""
    rank = _rank_of(lines[at])
    frames: list[str] = []
    for line in lines[max(0, at - 200) : at][::-1]:
        if rank is not None and _rank_of(line) not in (rank, None):
            continue
        if "Traceback (most recent call last)" in line:
            break
        if _FRAME_LINE.match(_frame_text(line)):
            frames.append(line)
    return frames


def _first(pattern: _Pattern, lines: Sequence[str]) -> tuple[int, str] | None:
    """The line that proves a pattern, preferring an exception's message over a source line raising it."""
    hits = []
    for index, line in enumerate(lines):
        text = _clean(line)
        if not pattern.regex.search(text):
            continue
        is_exception = bool(_EXCEPTION_LINE.search(text))
        if not is_exception and not _ERROR_LINE.search(text):
            continue
        if pattern.exception_only and not is_exception:
            continue
        if pattern.exclude is not None and pattern.exclude.search(text):
            continue
        warning = _WARNING_LINE.search(text) and not is_exception
        if warning and (pattern.warning_ok is None or not pattern.warning_ok.search(text)):
            continue
        if pattern.raised_in is not None and not any(pattern.raised_in.search(f) for f in _frames_above(lines, index)):
            continue
        hits.append((index, is_exception))
    if not hits:
        return None
    index = next((i for i, exc in hits if exc), hits[0][0])
    if pattern.kind is FailureKind.USER_ERROR:
        index = _end_of_chain(index, [i for i, exc in hits if exc], lines)
    return index, lines[index]


_CHAINED = re.compile(r"During handling of the above exception|The above exception was the direct cause")


def _end_of_chain(index: int, exceptions: Sequence[int], lines: Sequence[str]) -> int:
    """A user error raised while handling another (`ValueError: Cannot open dataset_info.json` around the
    JSONDecodeError that names no file): the last exception of the chain says what the user gave."""
    for later in (i for i in exceptions if i > index):
        if not any(_CHAINED.search(line) for line in lines[index:later]):
            break
        index = later
    return index


def classify_text(lines: Sequence[str], steps_seen: bool) -> tuple[FailureKind, tuple[str, ...]] | None:
    """The kind of failure a traceback or log shows, with the lines that prove it; None if no pattern hits."""
    found = _classify_lines(lines, steps_seen)
    return None if found is None else (found.kind, found.lines)


# An exception's own line: its type starts the line (after a rank prefix), as Python prints it.
_RAISED_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b:")
# what a launcher raises because a rank died: not the rank's own cause
_CONSEQUENCE_EXCEPTION = re.compile(r"ChildFailedError|SignalException|DistBackendError|DistNetworkError|ProcessExited")


def _only_quoted(lines: Sequence[str], at: int) -> bool:
    """Whether the OOM words on line `at` only quote one (a training sample swift logs, a tip) while a traceback
    of the log ends in another exception of a rank's own: the words are not where a line starts with an
    exception, no traceback leads to them, and some traceback leads to that other exception."""
    if _RAISED_LINE.match(_clean(lines[at])) or _frames_above(lines, at):
        return False
    return any(
        _RAISED_LINE.match(text)
        and not _OOM.search(text)
        and not _CONSEQUENCE_EXCEPTION.search(text)
        and _frames_above(lines, index)
        for index, text in ((i, _clean(line)) for i, line in enumerate(lines))
    )


def _classify_lines(lines: Sequence[str], steps_seen: bool) -> _Found | None:
    oom = _first(_GPU_OOM, lines) or _first(_GPU_OOM_WARNING, lines)
    if oom is not None and _only_quoted(lines, oom[0]):
        oom = None
    if oom is not None:
        oom_at = oom[0]
        kind, marker = _oom_phase(lines, oom_at, steps_seen)
        proof = (_clean(lines[oom_at]),) if marker is None else (_clean(lines[oom_at]), marker)
        return _Found(kind, proof, _rank_of(lines[oom_at]))
    host = _first(_HOST, lines)
    if host is not None and not _errno_of_a_lock(host[0], lines):
        return _Found(FailureKind.HOST_OOM, (_clean(host[1]),), _rank_of(host[1]))
    # An NCCL watchdog aborts the process: the abort is its consequence, not a crash of its own.
    nccl_abort = _nccl_abort(lines)
    patterns = [p for p in _PATTERNS if not (nccl_abort and p.kind is FailureKind.CRASH)]
    hits = [(pattern, hit) for pattern in patterns if (hit := _first(pattern, lines)) is not None]
    if not hits:
        return None
    pattern, (at, line) = hits[0]
    stop = next(((i, text) for p, (i, text) in hits if p.kind is FailureKind.INTERRUPTED and i < at), None)
    if stop is not None and pattern.kind in _INTERRUPT_SEQUELS:  # raised while the program shut down
        return _Found(FailureKind.INTERRUPTED, (_clean(stop[1]),), _rank_of(stop[1]), runner_up=pattern.kind)
    runner_up = next((p.kind for p, _ in hits[1:] if p.kind is not pattern.kind), None)
    fix = _environment_fix(lines, at) if pattern.kind is FailureKind.USER_ERROR else None
    cause = _wrapped_cause(lines, at) if pattern.kind is FailureKind.USER_ERROR else None
    said: tuple[str, ...] = ((cause,) if cause else ()) + (_clean(line),) + ((fix,) if fix else ())
    return _Found(pattern.kind, said, _rank_of(line), runner_up=runner_up)


# an exception that wraps its cause in words of its own that name neither the file nor what was wrong
_WRAPPER = re.compile(r"DatasetGenerationError: An error occurred while generating the dataset")
# `datasets`' own log of the file it could not load, and why
_LOAD_FAILED = re.compile(r"Failed to (?:load JSON from|read) file '[^']+' with error")


def _wrapped_cause(lines: Sequence[str], at: int) -> str | None:
    """What a wrapper exception's chain says it wraps (hostile47data F4): `datasets`' own line naming the file
    and the parse error, else the exception line the chain's last `direct cause` follows."""
    if not _WRAPPER.search(lines[at]):
        return None
    named = next((found for line in lines[:at] if (found := _LOAD_FAILED.search(line))), None)
    if named is not None:
        return _clean(named.string[named.start() :])
    marker = next((i for i in range(at - 1, max(at - 400, -1), -1) if _CHAINED.search(lines[i])), None)
    if marker is None:
        return None
    raised = (_clean(line) for line in reversed(lines[max(0, marker - 40) : marker]))
    return next((text for text in raised if _RAISED_LINE.match(text) or _EXCEPTION_LINE.search(text)), None)


# What to change for an error of the machine's own limits or permissions, where the error line alone does
# not say it (one line each, shown under the error): the error's pattern, one its traceback's last lines must
# show too (or None), the fix.
_ENVIRONMENT_FIXES = (
    (re.compile(r"Read-only file system"), re.compile(r"/dev/shm|SemLock"),
     "fix: /dev/shm is read-only: give the container a writable one (docker run --ipc=host or --shm-size=16g)"),
    (re.compile(r"Read-only file system"), None,
     "fix: that path is on a read-only filesystem: make it writable, or point the cache that writes there "
     "elsewhere (HF_HOME, MODELSCOPE_CACHE, TMPDIR, --output_dir)"),
    (re.compile(r"Too many open files"), None,
     "fix: raise the open-files limit (ulimit -n 65536; a container's --ulimit nofile=65536)"),
    (re.compile(r"can't start new thread|pthread_create failed"), None,
     "fix: raise the process and thread limit (ulimit -u; a container's --pids-limit), or lower "
     "--dataloader_num_workers and OMP_NUM_THREADS"),
    (re.compile(r"PackageNotFoundError|distribution was not found"), None,
     "fix: install the package it names in the Python every rank runs (pip install ...), or leave out the "
     "option that needs it (--deepspeed: pip install deepspeed)"),
    (re.compile(r"PermissionError|Permission denied"), None,
     "fix: make that path readable (and writable where it is written) by this user, or run as its owner"),
)  # fmt: skip


def _environment_fix(lines: Sequence[str], at: int) -> str | None:
    line, before = _clean(lines[at]), "\n".join(lines[max(0, at - 8) : at + 1])
    return next(
        (
            fix
            for error, near, fix in _ENVIRONMENT_FIXES
            if error.search(line) and (near is None or near.search(before))
        ),
        None,
    )


def _nccl_abort(lines: Sequence[str]) -> bool:
    """Whether a `terminate called after throwing` is NCCL's (or a collective's): named on its own line, or on
    the `what():` line that follows it (`std::runtime_error` / `what(): [Rank 0] Watchdog caught ...`)."""
    for index, line in enumerate(lines):
        if _NCCL_TERMINATE_LINE.search(line):
            return True
        if "terminate called after throwing" in line and index + 1 < len(lines):
            after = lines[index + 1]
            if "what():" in after and _NCCL_WHAT.search(after):
                return True
    return False


_NCCL_WHAT = re.compile(r"NCCL|[Ww]atchdog|collective operation|ProcessGroup|gloo|DistBackendError")


# what a program's own shutdown after a Ctrl-C raises (a cleanup's KeyError, a handler's NameError, its
# peers' lost connections, a kill): the interrupt logged before it is the cause
_INTERRUPT_SEQUELS = frozenset(
    {FailureKind.USER_ERROR, FailureKind.CRASH, FailureKind.COMM_ERROR, FailureKind.COMM_TIMEOUT, FailureKind.KILLED}
)


_ENOMEM_ONLY = re.compile(r"Cannot allocate memory|ENOMEM")
_MEMLOCK_LINE = re.compile(_MEMLOCK)


def _errno_of_a_lock(at: int, lines: Sequence[str]) -> bool:
    """Whether line `at`, a bare ENOMEM, is the error of a locked-memory failure reported a few lines above
    (Open MPI's `Failed to create a completion queue (CQ):` ... `Error: Cannot allocate memory`)."""
    line = lines[at]
    if not _ENOMEM_ONLY.search(line) or _HOST_ALLOC.search(_ENOMEM_ONLY.sub("", line)):
        return False  # no ENOMEM, or other words of host memory beside it (MemoryError, DefaultCPUAllocator)
    return any(_MEMLOCK_LINE.search(line) for line in lines[max(0, at - 10) : at])


def _signal_failure(failure: RankFailure, evidence: AttemptEvidence) -> _Found:
    signum = -(failure.exit_code or 0)
    name = SIGNAL_NAMES.get(signum, f"signal {signum}")
    where = f"rank {failure.rank} exited with {name}" if failure.rank is not None else f"a process exited with {name}"
    rank = failure.rank
    if signum == 9:
        if evidence.kernel_oom:
            return _Found(FailureKind.HOST_OOM, (where, *evidence.kernel_oom), rank)
        if evidence.kernel_checked:
            return _Found(FailureKind.KILLED, (where + " and no OOM evidence",), rank, Confidence.THIN)
        # A saved log cannot show that no OOM kill happened; the kernel's OOM killer sends most SIGKILLs.
        return _Found(FailureKind.HOST_OOM, (where + " (no kernel log to confirm)",), rank, Confidence.THIN,
                      FailureKind.KILLED)  # fmt: skip
    if signum == 7:
        return _Found(FailureKind.SHM, (where + ": a bus error, most often a full /dev/shm",), rank,
                      Confidence.THIN, FailureKind.CRASH)  # fmt: skip
    if signum in NATIVE_CRASH_SIGNALS:
        return _Found(FailureKind.CRASH, (where,), rank)
    if signum in (1, 2, 15):
        return _Found(FailureKind.KILLED, (where,), rank, Confidence.THIN, FailureKind.INTERRUPTED)
    return _Found(FailureKind.UNKNOWN, (where,), rank, Confidence.THIN)


# Exit statuses that say what went wrong by convention: argparse's usage error, the shell's.
_USAGE_EXIT_CODES = {
    2: "exit code 2: a command-line usage error (argparse exits 2)",
    126: "exit code 126: the command cannot be executed (permissions)",
    127: "exit code 127: command not found",
}


def _rank_strength(found: _Found, exit_code: int | None, by_text: bool = True) -> float:
    if found.confidence is Confidence.THIN and found.kind is FailureKind.HOST_OOM:
        return SIGKILLED
    if not by_text and exit_code == -6:
        return SECONDARY - 0.5  # NCCL's watchdog and C++ `terminate` abort too: a bare SIGABRT follows other causes
    if found.kind is FailureKind.INTERRUPTED:
        return STOPPED
    return strength(found.kind, exit_code)


_COMM_KINDS = (FailureKind.COMM_ERROR, FailureKind.COMM_TIMEOUT)
# signals a process is sent (a user's kill, Ctrl-C, a closed terminal), not raised by itself: a SIGABRT is
# NCCL's watchdog or C++ `terminate` after another cause, a SIGSEGV a crash that ranks high already
_SENT_SIGNALS = (-15, -2, -1)


def _after_own_failure(strong: float, first_failure: bool) -> float:
    """A secondary finding (lost connections, timeouts, signals) ranks below a rank's own failure, named or
    not, when there is one."""
    return CONSEQUENCE if first_failure and strong <= SECONDARY else strong


# what a signal to the ranks leaves (a KeyboardInterrupt, its peers' lost connections, nothing named)
_SIGNAL_SEQUELS = (
    FailureKind.INTERRUPTED, FailureKind.KILLED, FailureKind.COMM_ERROR, FailureKind.COMM_TIMEOUT, FailureKind.UNKNOWN
)  # fmt: skip


def _failed_before_signal(evidence: AttemptEvidence) -> Failure | None:
    """A rank's failure that torchrun observed before safe-sft received the signal (its `time`, cut to the
    second, is at or before it) and that no signal causes: the attempt's own root cause, the signal only
    what stopped the run after it (a Ctrl-C just after a rank died, while torchrun wound down). A rank's
    SIGKILL counts: safe-sft's own comes only after --grace-period."""
    at = evidence.interrupted_at
    first = tuple(
        failure
        for failure in evidence.rank_failures
        if at is not None and failure.timestamp is not None and failure.timestamp <= at
        and failure.exit_code not in _SENT_SIGNALS
    )  # fmt: skip
    if not first:
        return None
    found = classify(AttemptEvidence(exit_code=1, rank_failures=first, kernel_oom=evidence.kernel_oom))
    if found is None or (found.kind in _SIGNAL_SEQUELS and found.exit_code != -9):
        return None
    return found


# What a hang's log can show as its cause: a DataLoader worker or a rank that died of memory or of /dev/shm,
# which the trainer or its peers then wait for (a full /dev/shm hung a run for its whole start-up allowance,
# and was retried as a communication hang: hostile47env F1)
_HANG_CAUSES = frozenset(
    {FailureKind.SHM, FailureKind.MEMLOCK, FailureKind.HOST_OOM, FailureKind.CUDA_OOM, FailureKind.CUDA_OOM_LOAD,
     FailureKind.CUDA_OOM_SAVE, FailureKind.CUDA_OOM_EVAL}
)  # fmt: skip


def classify(evidence: AttemptEvidence) -> Failure | None:
    """None when the attempt succeeded; otherwise the root cause with its evidence."""
    if evidence.interrupted_by:
        interrupted = FailureKind.INTERRUPTED
        said = f"safe-sft received {evidence.interrupted_by}"
        if (first := _failed_before_signal(evidence)) is not None:
            return replace(first, evidence=(*first.evidence, f"then {said}"))
        return Failure(interrupted, (said,), summary=_summary(interrupted))
    if evidence.hang and evidence.hang_cause:  # an OOM that one rank's retry hid from the log
        oom = FailureKind.CUDA_OOM
        return Failure(oom, (evidence.hang_cause, evidence.hang), exit_code=evidence.exit_code, summary=_summary(oom))
    if evidence.hang:
        cause = _classify_lines(evidence.log_tail, evidence.steps_seen)
        if cause is not None and cause.kind in _HANG_CAUSES:  # one process died of it; the rest waited for it
            return Failure(
                cause.kind, (*cause.lines, evidence.hang), cause.rank, evidence.exit_code, _summary(cause.kind)
            )
        return Failure(
            FailureKind.HANG, (evidence.hang,), exit_code=evidence.exit_code, summary=_summary(FailureKind.HANG)
        )
    if evidence.exit_code == 0 and not evidence.rank_failures:
        return None

    # A rank that failed with an exit status of its own came first: the SIGTERMs of its peers follow from it.
    first_failure = any((f.exit_code or 0) > 0 for f in evidence.rank_failures)
    # (strength, proven by a line rather than an exit status alone, earliest first, the finding, its exit code)
    candidates: list[tuple[float, int, float, _Found, int | None]] = []
    # torchrun lists its root cause (its first observed failure) first: where that rank died of a signal with
    # no error of its own, the lost connections its peers report before torchrun SIGTERMs them follow from it
    # (gloo: "typically caused by a remote worker crashing"), even though a SIGTERM ranks low by itself
    signal_root = False
    for order, failure in enumerate(evidence.rank_failures):
        found = _classify_lines(failure.message.splitlines(), evidence.steps_seen) if failure.message else None
        by_text = found is not None
        if found is None and failure.exit_code is not None and failure.exit_code < 0:
            found = _signal_failure(failure, evidence)
        elif found is None and failure.exit_code in _USAGE_EXIT_CODES:
            found = _Found(FailureKind.USER_ERROR, (_USAGE_EXIT_CODES[failure.exit_code],), None, Confidence.THIN,
                           FailureKind.UNKNOWN)  # fmt: skip
        elif found is None and (failure.exit_code or 0) > 0 and failure.message.strip():
            last = [line.strip() for line in failure.message.splitlines() if line.strip()][-1]
            found = _Found(FailureKind.UNKNOWN, (_clean(last),), None, Confidence.THIN)  # its own error, unnamed
        if found is None or (first_failure and not by_text and found.kind is FailureKind.KILLED):
            continue
        found = _Found(found.kind, found.lines, failure.rank, found.confidence, found.runner_up)
        when = failure.timestamp if failure.timestamp is not None else float(order)
        strong = _rank_strength(found, failure.exit_code, by_text)
        if order == 0 and failure.exit_code in _SENT_SIGNALS and not by_text and failure.rank is not None:
            signal_root = True
        elif signal_root and found.kind in _COMM_KINDS and (failure.exit_code or 0) < 0:
            strong = CONSEQUENCE
        if (failure.exit_code or 0) < 0:  # a peer torchrun signalled: after a rank's own failure, it follows
            strong = _after_own_failure(strong, first_failure)
        candidates.append((strong, int(by_text), -when, found, failure.exit_code))
    tail = _classify_lines(evidence.log_tail, evidence.steps_seen)
    if tail is not None:
        strong = _after_own_failure(_rank_strength(tail, None), first_failure)
        if signal_root and tail.kind in _COMM_KINDS:
            strong = CONSEQUENCE
        candidates.append((strong, 1, float("-inf"), tail, evidence.exit_code))
    if evidence.kernel_oom and not any(c[3].kind is FailureKind.HOST_OOM for c in candidates):
        kernel = _Found(FailureKind.HOST_OOM, tuple(evidence.kernel_oom))
        candidates.append((PRIMARY - 0.1, 1, float("-inf"), kernel, evidence.exit_code))
    if evidence.stopped_by:
        stop = _Found(FailureKind.INTERRUPTED, (evidence.stopped_by,))
        candidates.append((STOPPED, 1, float("-inf"), stop, evidence.exit_code))
    if not candidates and evidence.exit_code is not None and evidence.exit_code < 0:
        # The launcher itself (torchrun, or swift's one process) died of a signal before it could name a rank
        found = _signal_failure(RankFailure(None, evidence.exit_code), evidence)
        launcher = _Found(found.kind, tuple(line.replace("a process", "the launcher", 1) for line in found.lines),
                          None, found.confidence, found.runner_up)  # fmt: skip
        candidates.append((_rank_strength(launcher, evidence.exit_code, False), 0, 0.0, launcher, evidence.exit_code))
    signalled = next((line.strip() for line in evidence.log_tail if LAUNCHER_SIGNAL.search(line)), None)
    if not candidates and signalled:  # torchrun's agent, signalled by someone else, stopped its ranks
        killed = FailureKind.KILLED
        said = f"the launcher was signalled: {_clean(signalled)}"
        return Failure(killed, (said,), exit_code=evidence.exit_code, summary=_summary(killed))
    if not candidates:
        # a rank that exited with a code and printed no traceback (torchrun's summary without @record): its
        # exit, rather than whatever the log ends with (torchrun's own lines)
        failed = next((f for f in evidence.rank_failures if (f.exit_code or 0) > 0 and f.rank is not None), None)
        lines = tuple(line.strip() for line in evidence.log_tail[-3:] if line.strip())
        if failed is not None:
            lines = (f"rank {failed.rank} exited with code {failed.exit_code}",)
        proof = lines or ((f"exit code {evidence.exit_code}",) if evidence.exit_code is not None else ())
        code = evidence.exit_code if evidence.exit_code is not None or failed is None else failed.exit_code
        return Failure(
            FailureKind.UNKNOWN, proof, exit_code=code, summary=_summary(FailureKind.UNKNOWN),
            confidence=Confidence.THIN, rank=None if failed is None else failed.rank,
        )  # fmt: skip
    # The strongest kind wins; among equals, one a line proves, then the earliest (error-file time, else order).
    candidates.sort(key=lambda c: c[:3], reverse=True)
    best, exit_code = candidates[0][3:]
    runner_up = best.runner_up or next((c[3].kind for c in candidates[1:] if c[3].kind is not best.kind), None)
    return Failure(
        best.kind,
        best.lines,
        best.rank,
        exit_code if exit_code is not None else evidence.exit_code,
        _summary(best.kind),
        best.confidence,
        runner_up if runner_up is not best.kind else None,
    )


_SUMMARIES = {
    FailureKind.CUDA_OOM: "CUDA out of memory in a training step",
    FailureKind.CUDA_OOM_LOAD: "CUDA out of memory while loading or initialising",
    FailureKind.CUDA_OOM_SAVE: "CUDA out of memory while saving a checkpoint",
    FailureKind.CUDA_OOM_EVAL: "CUDA out of memory during evaluation",
    FailureKind.HOST_OOM: "host RAM exhausted",
    FailureKind.MEMLOCK: "locked-memory limit (memlock) too low for pinned memory",
    FailureKind.SHM: "/dev/shm too small",
    FailureKind.DISK_FULL: "the disk is full",
    FailureKind.DOWNLOAD: "a download failed: the hub or another web host could not be reached",
    FailureKind.COMM_TIMEOUT: "a collective operation timed out",
    FailureKind.COMM_ERROR: "communication between ranks failed",
    FailureKind.CUDA_ERROR: "a CUDA error other than out of memory",
    FailureKind.CRASH: "a native crash",
    FailureKind.KILLED: "a training process was killed",
    FailureKind.USER_ERROR: (
        "an error a retry does not fix: in the set-up (arguments, paths, data, a port in use) or the code"
    ),
    FailureKind.INTERRUPTED: "the run was interrupted or cancelled",
    FailureKind.HANG: "no progress within the watchdog's allowance",
    FailureKind.UNKNOWN: "an unrecognised failure",
}


def _summary(kind: FailureKind) -> str:
    return _SUMMARIES.get(kind, kind.value)


def merge_failures(summary: Sequence[RankFailure], error_files: Sequence[RankFailure]) -> tuple[RankFailure, ...]:
    """torchrun's summary knows every failed rank and its exit code; an error file knows its full error.

    A rank killed by a signal writes no error file, so neither source alone is enough.
    """
    by_rank = {f.rank: f for f in error_files}
    merged = []
    for failure in summary:
        detail = by_rank.pop(failure.rank, None)
        if detail is not None and (failure.exit_code is None or failure.exit_code >= 0):
            failure = RankFailure(failure.rank, failure.exit_code, detail.message, detail.timestamp)
        merged.append(failure)
    merged.extend(by_rank.values())
    return tuple(merged)
