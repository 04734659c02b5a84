/* blockswap client library: the stable C ABI.
 *
 * A trainer attaches to the node's blockswapd, registers (or opens) a model
 * of frozen blocks, creates rings of device buffers and streams blocks into
 * them. Loads follow the protocol of docs/protocol.md, ordered against the stream
 * the caller passes:
 *
 *   bs_ring_load(ring, s, model, b, stream)   releases slot s (after the
 *                                             work already on `stream`) and
 *                                             asks the daemon for block b
 *   bs_ring_wait(ring, s, stream, timeout)    makes `stream` wait until the
 *                                             block is in the slot
 *   ... work on `stream` reads bs_ring_slot(ring, s) ...
 *   bs_ring_release(ring, s, stream)          optional: done with the slot
 *
 * `stream` is a cudaStream_t on the cuda backend (NULL: the legacy default
 * stream) and must be NULL on the host backend, where it means "the calling
 * thread": the wait blocks, and the slot pointer is host memory.
 *
 * Every function returning int returns 0 (BS_OK) or a google.rpc.Code; the
 * message of the calling thread's last failure is bs_last_error(). Objects
 * are thread-safe unless noted. No gRPC, protobuf, abseil or Boost type
 * crosses this interface.
 *
 * fork(). Handles belong to the process that attached. In a child
 * forked after bs_connect (a DataLoader worker, say) every call on an
 * inherited handle fails BS_FAILED_PRECONDITION ("... was forked from pid N
 * after that process attached ..."), functions that return a value return
 * their empty one (0, NULL, UINT32_MAX) with that message in bs_last_error,
 * and bs_connect fails the same way (gRPC cannot attach again after fork()).
 * bs_ring_close fails like the other calls. The destroy functions
 * (bs_disconnect, bs_model_close, bs_ring_destroy, bs_scheduler_destroy)
 * are safe in the child: they free the handle's own
 * memory and nothing else (no call to the daemon, nothing shared touched),
 * so the parent's session, rings and mappings carry on. A process that
 * streams attaches itself: start it with exec, or as a spawn/forkserver
 * worker.
 */
#ifndef BLOCKSWAP_BLOCKSWAP_H_
#define BLOCKSWAP_BLOCKSWAP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A daemon refuses at Attach a library whose version is newer than its own. */
#define BS_ABI_VERSION 1u

enum bs_code {
  BS_OK = 0,
  BS_CANCELLED = 1,
  BS_UNKNOWN = 2,
  BS_INVALID_ARGUMENT = 3,
  BS_DEADLINE_EXCEEDED = 4,
  BS_NOT_FOUND = 5,
  BS_ALREADY_EXISTS = 6,
  BS_PERMISSION_DENIED = 7,
  BS_RESOURCE_EXHAUSTED = 8,
  BS_FAILED_PRECONDITION = 9,
  BS_ABORTED = 10,
  BS_OUT_OF_RANGE = 11,
  BS_UNIMPLEMENTED = 12,
  BS_INTERNAL = 13,
  BS_UNAVAILABLE = 14,
  BS_DATA_LOSS = 15,
  BS_UNAUTHENTICATED = 16,
};

enum bs_backend { BS_BACKEND_HOST = 1, BS_BACKEND_CUDA = 2 };

typedef struct bs_client bs_client;
typedef struct bs_model bs_model;
typedef struct bs_ring bs_ring;

/* The ABI version of the loaded library (BS_ABI_VERSION it was built with). */
uint32_t bs_abi_version(void);
/* The message of this thread's last failed call ("" if none). Valid until
 * the thread's next call into the library. */
const char* bs_last_error(void);

/* --- connection ---------------------------------------------------------- */

/* Connects to the daemon at `socket_path` (NULL or "": $BLOCKSWAP_SOCKET if set,
 * else /run/blockswap/blockswapd.sock, else, when nothing answers there, the
 * caller's private daemon in /dev/shm/blockswap-<uid>, started from the
 * blockswapd beside this library when none runs; BLOCKSWAP_AUTOSTART=0 turns
 * that off) and attaches a session named `client_name` (may be NULL). */
int bs_connect(const char* socket_path, const char* client_name, bs_client** out);
/* Detaches and frees the client. Models and rings of the client must have
 * been closed first. NULL is ignored. */
void bs_disconnect(bs_client* client);

int bs_client_backend(const bs_client* client); /* enum bs_backend */
uint32_t bs_client_device_count(const bs_client* client);
/* The UUID of device `index` of the daemon, or NULL out of range. */
const char* bs_client_device_uuid(const bs_client* client, uint32_t index);

/* --- models --------------------------------------------------------------- */

typedef struct bs_tensor_desc {
  const char* name;       /* relative to the block, e.g. "attn.to_q.weight" */
  const char* dtype;      /* safetensors dtype: "F32", "BF16", "F8_E4M3", ... */
  const uint64_t* shape;  /* `ndim` dimensions */
  uint32_t ndim;
  const void* data;       /* the tensor's bytes, contiguous */
} bs_tensor_desc;

typedef struct bs_block_desc {
  const bs_tensor_desc* tensors;
  uint32_t tensor_count;
} bs_block_desc;

/* Registers a model: packs every block into the flat layout (tensors at
 * 256-byte aligned offsets), uploads it, and opens the resulting model. The
 * same content registered by any process is one model (same id). */
int bs_model_register(bs_client* client, const char* name, const bs_block_desc* blocks,
                      uint32_t block_count, bs_model** out);
/* Registration straight from safetensors files: the daemon reads the file
 * once per node (this process never holds the weights), groups tensors into
 * blocks by `block_pattern` and packs each block in the file's order. */
typedef struct bs_file_options {
  const char* block_pattern; /* RE2 with one capture group, the block index,
                                e.g. "^transformer_blocks\\.(\\d+)\\."; the
                                tensor's name in the block is what follows */
  const char* select;        /* RE2 searched in the full name, e.g. "\\.weight$";
                                NULL or "": every tensor of a block */
  uint32_t select_rank;      /* only tensors of this many dimensions; 0: any */
  const char* name;          /* informational; NULL: the file's name */
} bs_file_options;
/* Registers the model of `path` (a .safetensors file, or a sharded
 * checkpoint's *.index.json) and opens it; this process opens the files (the
 * daemon reads only what its client can) and passes them to the daemon. The
 * id is the one bs_model_register gives the same blocks; registering an
 * unchanged file again reads nothing. `*extras` (when `extras` is not NULL)
 * receives the tensors not streamed (outside every block or not selected),
 * one block under their full names, or NULL when there are none. NOT_FOUND
 * when the pattern or selector matches nothing; INVALID_ARGUMENT for a bad
 * file; RESOURCE_EXHAUSTED when the daemon has no room. */
int bs_model_register_file(bs_client* client, const char* path, const bs_file_options* options,
                           bs_model** model, bs_model** extras);
/* Opens a model registered before, by its id (64 hex digits). */
int bs_model_open(bs_client* client, const char* model_id, bs_model** out);
void bs_model_close(bs_model* model);

const char* bs_model_id(const bs_model* model);
uint32_t bs_model_block_count(const bs_model* model);
uint64_t bs_model_block_bytes(const bs_model* model, uint32_t block);
uint32_t bs_model_tensor_count(const bs_model* model, uint32_t block);

typedef struct bs_tensor_info {
  const char* name;
  const char* dtype;
  const uint64_t* shape;
  uint32_t ndim;
  uint64_t offset; /* in the block */
  uint64_t length; /* bytes */
} bs_tensor_info;
/* Pointers in `out` stay valid while the model is open. */
int bs_model_tensor(const bs_model* model, uint32_t block, uint32_t tensor, bs_tensor_info* out);
/* A read-only host view of a block's master bytes (the daemon's one copy). */
const void* bs_model_master(const bs_model* model, uint32_t block);
/* Matches what a caller streams of one block (`tensors`: the model's name,
 * dtype and shape of each; `data` is not read) with block `block` of the
 * model: the block must hold exactly these tensors, each with the same dtype
 * and shape. Writes each one's byte offset in the block to offsets[i]. The
 * first disagreement fails, named (the caller's tensors are "the
 * selector's", "the module's"): INVALID_ARGUMENT for a dtype or shape
 * that differs (or a name given twice), NOT_FOUND for a tensor the block
 * lacks (listing its tensors), FAILED_PRECONDITION for a tensor of the block
 * not given. */
int bs_model_match_block(const bs_model* model, uint32_t block, const bs_tensor_desc* tensors,
                         uint32_t count, uint64_t* offsets);

/* --- layout rules, without a daemon --------------------------------------- */

/* The safetensors dtype ("BF16") of the PyTorch dtype `torch_name` as Python
 * spells it after "torch." ("bfloat16"), a static string; NULL, with the
 * dtypes blockswap streams in bs_last_error, for one it cannot stream. */
const char* bs_dtype_of_torch(const char* torch_name);
/* The bytes of a block of `count` tensors of `tensor_bytes` bytes each, in
 * order, in the flat layout (each tensor 256-byte aligned, the end rounded
 * up): the slot size a ring needs to hold it. */
int bs_block_layout_bytes(const uint64_t* tensor_bytes, uint32_t count, uint64_t* out);

/* --- rings ---------------------------------------------------------------- */

/* Creates a ring of `slot_count` slots of `slot_bytes` on the device with
 * this UUID (one of bs_client_device_uuid). */
int bs_ring_create(bs_client* client, const char* device_uuid, uint32_t slot_count,
                   uint64_t slot_bytes, bs_ring** out);
/* Ends the ring in the order CUDA's IPC rules need: waits for outstanding
 * loads, records each slot's release on `stream` (which must follow the last
 * use of every slot), synchronises it, closes the imported memory and events,
 * then has the daemon free the ring. With the daemon gone it only
 * synchronises and closes. Every later call on the ring fails but
 * bs_ring_destroy; closing again returns BS_OK. */
int bs_ring_close(bs_ring* ring, void* stream, uint32_t timeout_ms);
/* bs_ring_close(ring, NULL, 5000) unless the ring was closed, then frees the
 * handle. NULL is the legacy default stream on cuda, which follows only the
 * blocking streams: close with the stream that used the ring first. */
void bs_ring_destroy(bs_ring* ring);

uint32_t bs_ring_slot_count(const bs_ring* ring);
uint64_t bs_ring_slot_bytes(const bs_ring* ring);
/* The slot's memory: a device pointer on cuda, a host pointer on host. */
void* bs_ring_slot(const bs_ring* ring, uint32_t slot);

int bs_ring_load(bs_ring* ring, uint32_t slot, const bs_model* model, uint32_t block,
                 void* stream);
int bs_ring_wait(bs_ring* ring, uint32_t slot, void* stream, uint32_t timeout_ms);
int bs_ring_release(bs_ring* ring, uint32_t slot, void* stream);
/* Waits until every load requested on the ring has been filled. */
int bs_ring_drain(bs_ring* ring, uint32_t timeout_ms);

/* --- stream scheduler ------------------------------------------------------
 * The reference offloader's residency logic (docs/client.md), written once: which
 * of `num_blocks` transformer blocks stream (`blocks_to_swap` of them, placed
 * evenly), which ring slot holds which, prefetching ahead in forward and
 * behind in backward, self-heal, inference wrap-around, no-op rebinds. It
 * drives `ring` with loads of `model`, whose block r must be the r-th
 * streaming block (bs_scheduler_streaming_block) or, with
 * `model_has_every_block`, transformer block r, ordered against `stream`
 * (as for bs_ring_load). Every binding of a block to a slot is told to
 * `on_bind` (so an integration can point the block's tensors at the slot);
 * each finished pass's statistics are reported to the daemon. Not
 * thread-safe: one training thread drives a scheduler. */

typedef struct bs_scheduler bs_scheduler;

typedef struct bs_scheduler_config {
  uint32_t num_blocks;
  uint32_t blocks_to_swap;
  uint32_t ring_size;   /* clamped to blocks_to_swap */
  int forward_only;     /* inference: wrap around after the last block */
  /* 0: block r of the model is the r-th streaming block (a trainer that
     registered only those); 1: block b of the model is transformer block b
     (a model of every block, e.g. registered from a file). */
  int model_has_every_block;
} bs_scheduler_config;

/* `loaded` is 1 when a copy was issued, 0 for a no-op rebind. */
typedef void (*bs_bind_fn)(void* user_data, uint32_t block, uint32_t slot, int loaded);

enum bs_direction { BS_FORWARD = 1, BS_BACKWARD = 2 };

/* A pass's statistics with both of its waits:
 *   stall_seconds      how long the compute stream sat idle at the pass's
 *                      waits, measured on the stream (timing events around
 *                      the wait on cuda): the time the trainer really lost;
 *   host_wait_seconds  how long the calling thread blocked in them, mostly
 *                      its own queued compute draining, not time lost;
 *   copy_seconds       the daemon's copy-stream time for the ring's copies
 *                      that the pass's waits saw complete, each copy counted
 *                      once (a pass's last prefetches count in the next pass). */
typedef struct bs_pass_stats {
  int direction; /* enum bs_direction */
  double stall_seconds;
  double host_wait_seconds;
  double copy_seconds;
  uint64_t waits;
  uint64_t not_ready_waits;
  uint64_t self_heals;
  uint64_t loads;
  uint64_t rebinds;
} bs_pass_stats;

/* The placement a scheduler with this configuration uses, without a daemon:
 * the streaming block indices, ascending (rank r is streaming[r]), into
 * `streaming` (room for `capacity`; NULL with capacity 0 asks only for the
 * count), their number into *count and the ring size after the clamp into
 * *ring_slots (either may be NULL). An integration calls it to know which
 * blocks to register before it creates the scheduler. */
int bs_place_blocks(uint32_t num_blocks, uint32_t blocks_to_swap, uint32_t ring_size,
                    uint32_t* streaming, uint32_t capacity, uint32_t* count, uint32_t* ring_slots);

int bs_scheduler_create(bs_client* client, bs_ring* ring, const bs_model* model,
                        const bs_scheduler_config* config, void* stream, bs_bind_fn on_bind,
                        void* user_data, bs_scheduler** out);
void bs_scheduler_destroy(bs_scheduler* scheduler);

uint32_t bs_scheduler_ring_slots(const bs_scheduler* scheduler); /* after the clamp */
uint32_t bs_scheduler_streaming_count(const bs_scheduler* scheduler);
/* The transformer block index of streaming rank `rank` (UINT32_MAX out of range). */
uint32_t bs_scheduler_streaming_block(const bs_scheduler* scheduler, uint32_t rank);
int bs_scheduler_is_streaming(const bs_scheduler* scheduler, uint32_t block);

int bs_scheduler_prepare(bs_scheduler* scheduler);
int bs_scheduler_wait_for_block(bs_scheduler* scheduler, uint32_t block);
int bs_scheduler_after_forward(bs_scheduler* scheduler, uint32_t block);
int bs_scheduler_after_backward(bs_scheduler* scheduler, uint32_t block);
int bs_scheduler_set_forward_only(bs_scheduler* scheduler, int forward_only);
/* Block `block` is in its slot and the stream waits for it, within
 * the pass in progress (no pass boundary, unlike wait_for_block): for a
 * backward that needs what the block's forward saved (a view of its slot)
 * when the hooks did not bring it back (out of the expected order). A load
 * on demand counts as a self-heal. A resident block is a no-op. */
int bs_scheduler_ensure_block(bs_scheduler* scheduler, uint32_t block);
/* `fn` is told, inside after_forward / after_backward, each slot that
 * hook is about to hand back for another block's load, before the slot is
 * released: work the caller queues on the slot then, on the scheduler's
 * stream, is ordered before the daemon's copy into it (e.g. poisoning a
 * slot in a test, to catch reads of a block that has gone). NULL removes it. */
typedef void (*bs_reload_fn)(void* user_data, uint32_t slot);
int bs_scheduler_set_reload_hook(bs_scheduler* scheduler, bs_reload_fn fn, void* user_data);
/* When the daemon is lost (killed, crashed, restarted or shut down), a hook
 * brings the scheduler's session back before it returns: it re-attaches on
 * the same socket, reopens the model by id (a daemon restarted on the same
 * --shm-prefix has adopted it: nothing is uploaded again), re-creates the
 * ring and reloads what its slots held. The ring's slot addresses change
 * (bs_ring_slot); on_bind is told every reloaded block again (loaded = 1).
 * It keeps trying to re-attach for `timeout_ms` (default 30000), then the
 * hook fails with BS_UNAVAILABLE and the reason; 0 turns reconnection off
 * (the loss fails the hook at once). Other models and rings of the client
 * are not brought back: they keep failing. */
int bs_scheduler_set_reconnect_timeout(bs_scheduler* scheduler, uint32_t timeout_ms);
/* Ends the current pass (reports it); the next hook starts a new one. */
int bs_scheduler_finish_pass(bs_scheduler* scheduler);
/* The statistics of the last finished pass in `direction`. Reads block until
 * the stream has passed the waits issued so far (on a GPU, about what a
 * stream synchronisation costs): a pass's stall is measured on the stream. */
int bs_scheduler_last_pass(const bs_scheduler* scheduler, int direction, bs_pass_stats* out);

/* --- offloader -------------------------------------------------------------
 * The streaming offloader's sequence, written once for every integration
 * (the LibTorch layer, the Python package): placement, the checks that need
 * no tensor library, attaching, opening or registering the model, matching
 * each block's streamed tensors with the model's layout, the ring and the
 * scheduler over it, which slot holds which block, and the scheduler's
 * hooks. What an integration keeps is what needs its tensors: selecting
 * them, rebinding them to a slot or a master (bs_offloader_slot,
 * bs_offloader_master, bs_offloader_tensor_offset) when on_bind says so,
 * hooks, autograd. Its refusals name blocks as "<kind> block <b>". Set-up
 * refusals of what the trainer passed (device, frozen or meta tensors, a
 * layout that does not match) are INVALID_ARGUMENT. Not thread-safe: one
 * training thread drives an offloader. */

typedef struct bs_offloader bs_offloader;

typedef struct bs_offloader_config {
  const char* kind;          /* names blocks in messages: "blocks" gives "blocks block 3";
                                NULL or "": "block 3" */
  uint32_t num_blocks;
  uint32_t blocks_to_swap;
  uint32_t ring_size;        /* >= 1, clamped to the streaming blocks */
  int forward_only;
  const char* socket_path;   /* as bs_connect */
  const char* client_name;
  /* The model: one packed from the streaming blocks' tensors (both NULL or
     ""), one the daemon holds (model_id) or a file it registers (model_file,
     with the pattern, selector and rank of bs_file_options). */
  const char* model_id;
  const char* model_file;
  const char* model_block_pattern;
  const char* model_select;
  uint32_t model_select_rank;
  const char* model_name;    /* the packed model's name */
  /* After losing blockswapd the scheduler re-attaches for this long
     (bs_scheduler_set_reconnect_timeout), within [0, 3600]; 0 fails at once. */
  double reconnect_timeout_s;
  /* Appended to the refusal of a selected tensor the model's block lacks:
     how the integration maps names (NULL: nothing). */
  const char* name_hint;
} bs_offloader_config;

/* One streamed tensor of a block, as the integration sees it now. */
typedef struct bs_offloader_tensor {
  const char* name;          /* the model's name, relative to the block */
  const char* dtype;         /* safetensors dtype (bs_dtype_of_torch) */
  const uint64_t* shape;
  uint32_t ndim;
  const void* data;          /* host bytes, contiguous: read only to pack a model */
  int requires_grad;
  int is_meta;               /* never materialised: only a model in the daemon gives it */
} bs_offloader_tensor;

typedef struct bs_offloader_block {
  const bs_offloader_tensor* tensors;
  uint32_t tensor_count;
} bs_offloader_block;

/* `previous` is the block the slot held before (UINT32_MAX: none, or this
 * block again): its tensors go back to their masters. `loaded` is 1 when the
 * slot's bytes change (a copy), 0 for a no-op rebind. */
typedef void (*bs_offloader_bind_fn)(void* user_data, uint32_t block, uint32_t slot,
                                     uint32_t previous, int loaded);

/* Checks the configuration and places the streaming blocks; contacts no
 * daemon. */
int bs_offloader_create(const bs_offloader_config* config, bs_offloader** out);
/* Ends the scheduler and the ring (bs_offloader_close with NULL unless closed),
 * the model and the session. Safe in a forked child (frees only the handle). */
void bs_offloader_destroy(bs_offloader* offloader);

uint32_t bs_offloader_ring_slots(const bs_offloader* offloader); /* after the clamp */
uint32_t bs_offloader_streaming_count(const bs_offloader* offloader);
/* The block of streaming rank `rank` (UINT32_MAX out of range). */
uint32_t bs_offloader_streaming_block(const bs_offloader* offloader, uint32_t rank);
int bs_offloader_is_streaming(const bs_offloader* offloader, uint32_t block);
/* Whether the model comes from the daemon (model_id or model_file). */
int bs_offloader_from_daemon(const bs_offloader* offloader);

/* What a block's streamed tensors must be, whenever the integration asks
 * (they may change under it): those of a streaming block frozen, and at
 * least one. */
int bs_offloader_check_block(const bs_offloader* offloader, uint32_t block,
                             const bs_offloader_tensor* tensors, uint32_t count);
/* Refuses a tensor of `block` left meta (never materialised) that no model
 * gives, when the integration moves the block to its device. */
int bs_offloader_check_materialised(const bs_offloader* offloader, uint32_t block,
                                    const char* tensor, int is_meta);
/* Refuses what the selector returned for `block`: a module that is not part
 * of the block (`picked` NULL or "") or `picked`, a name that is neither a
 * parameter nor a registered buffer of the module. `owner` describes the
 * module for the message ("qkv (LoRALinear)"). Always INVALID_ARGUMENT. */
int bs_offloader_refuse_selection(const bs_offloader* offloader, uint32_t block, const char* owner,
                                  const char* picked);
/* FAILED_PRECONDITION saying why `what` cannot run during CUDA graph capture:
 * for an integration that found its stream capturing. */
int bs_offloader_refuse_capture(const char* what);

/* Attaches (bs_connect with the configured socket and name). */
int bs_offloader_connect(bs_offloader* offloader);
int bs_offloader_backend(const bs_offloader* offloader); /* enum bs_backend, once connected */
/* The integration's device: cpu (`cuda_ordinal` -1) on a host-backend daemon,
 * a cuda device the daemon drives on a cuda one: this process's device of
 * that CUDA ordinal, or the one of `device_uuid` ("GPU-..." or without the
 * prefix, any case) when given. On the host backend a NULL or "" `device_uuid`
 * is the daemon's first device. `device_name` ("cuda:0") is for messages. */
int bs_offloader_use_device(bs_offloader* offloader, int cuda_ordinal, const char* device_uuid,
                            const char* device_name);
/* Opens the model: registers the streaming blocks' tensors (their `data`),
 * or opens / registers the configured one and checks it holds every block or
 * only the streaming ones. Then matches each block's tensors with its model
 * block (`blocks` has num_blocks entries; those of resident blocks count only
 * with a model of every block, which gives them too; empty entries are
 * skipped). Until bs_offloader_start it may be called again (after a
 * refusal): the model opened before stays mapped until
 * bs_offloader_destroy (the integration's tensors may still view it). */
int bs_offloader_open_model(bs_offloader* offloader, const bs_offloader_block* blocks);
const char* bs_offloader_model_id(const bs_offloader* offloader); /* "" before */
/* The read-only master of block `block`'s bytes (NULL when the model does not
 * give the block) and the offset there, as in a slot, of its tensor `tensor`. */
const void* bs_offloader_master(const bs_offloader* offloader, uint32_t block);
uint64_t bs_offloader_master_bytes(const bs_offloader* offloader, uint32_t block);
uint64_t bs_offloader_tensor_offset(const bs_offloader* offloader, uint32_t block,
                                    uint32_t tensor);

/* Creates the ring (slots as large as the largest streaming block) and the
 * scheduler over it, ordered against `stream` (as for bs_ring_load); every
 * binding goes to `on_bind`. */
int bs_offloader_start(bs_offloader* offloader, void* stream, bs_offloader_bind_fn on_bind,
                       void* user_data);
int bs_offloader_started(const bs_offloader* offloader);
/* The slot's memory now (it moves when the scheduler re-creates the ring
 * after losing the daemon) and its size. */
void* bs_offloader_slot(const bs_offloader* offloader, uint32_t slot);
uint64_t bs_offloader_slot_bytes(const bs_offloader* offloader);
/* The slot of streaming block `block`, and the block bound to `slot`
 * (UINT32_MAX: none). */
uint32_t bs_offloader_slot_of(const bs_offloader* offloader, uint32_t block);
uint32_t bs_offloader_slot_block(const bs_offloader* offloader, uint32_t slot);

/* The scheduler's hooks (bs_scheduler_*). Before bs_offloader_start, a wait
 * for a streaming block, its forward hook and the reload hook refuse
 * (FAILED_PRECONDITION: never prepared); the others do nothing. */
int bs_offloader_prepare(bs_offloader* offloader);
int bs_offloader_wait_for_block(bs_offloader* offloader, uint32_t block);
int bs_offloader_after_forward(bs_offloader* offloader, uint32_t block);
int bs_offloader_after_backward(bs_offloader* offloader, uint32_t block);
int bs_offloader_ensure_block(bs_offloader* offloader, uint32_t block);
int bs_offloader_set_forward_only(bs_offloader* offloader, int forward_only);
int bs_offloader_set_reload_hook(bs_offloader* offloader, bs_reload_fn fn, void* user_data);
int bs_offloader_finish_pass(bs_offloader* offloader);
int bs_offloader_last_pass(const bs_offloader* offloader, int direction, bs_pass_stats* out);
/* The ring's teardown after the last use of its slots (bs_ring_close on
 * `stream`, which must follow it): the scheduler, then the ring. */
int bs_offloader_close(bs_offloader* offloader, void* stream, uint32_t timeout_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BLOCKSWAP_BLOCKSWAP_H_ */
