//! UROM workers: offload processes that run plugin commands.

use std::ffi::CString;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use super::service::{to_doca_cpuset, Service};
use super::sink::Sink;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::context::CtxKeepAlive;
use crate::executor::CpuSet;
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, BufTaskFuture, DocaTask, TaskOutput, TaskSlot};
use crate::sys;

/// The default number of commands a worker may have in flight.
pub const DEFAULT_MAX_INFLIGHT: u32 = 32;

/// Configures and starts a [`Worker`].
///
/// ```no_run
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::urom::{Service, Worker};
/// let svc = Service::connect(&async_doca::Device::open_default()?).await?;
/// let worker = Worker::builder(&svc)
///     .plugin("worker_graph")
///     .gid(1)
///     .cpuset("0".parse()?)
///     .env("MY_PLUGIN_LOG=debug")
///     .max_inflight(8)
///     .start()
///     .await?;
/// println!("worker {:#x} is running", worker.id());
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .start() is awaited"]
pub struct WorkerBuilder {
    service: Service,
    id: u64,
    gid: u32,
    plugin_names: Vec<String>,
    plugin_mask: u64,
    cpuset: Option<CpuSet>,
    env: Vec<String>,
    max_inflight: u32,
}

impl WorkerBuilder {
    /// The worker id. By default the service picks a fresh one; naming the id of a live worker
    /// attaches to that worker instead of spawning a new one (DOCA's convention for ids is
    /// `task_id << 32 | local_rank`).
    pub fn id(mut self, id: u64) -> Self {
        self.id = id;
        self
    }

    /// The group id, used by [`Service::workers_by_gid`] (default 0).
    pub fn gid(mut self, gid: u32) -> Self {
        self.gid = gid;
        self
    }

    /// Loads the plugin called `name` in the worker (resolved against the service's plugin
    /// list at start). May be called several times.
    pub fn plugin(mut self, name: &str) -> Self {
        self.plugin_names.push(name.to_owned());
        self
    }

    /// Loads the plugins whose ids are set in `mask`.
    pub fn plugin_ids(mut self, mask: u64) -> Self {
        self.plugin_mask |= mask;
        self
    }

    /// The CPUs the worker process may run on; must lie inside [`Service::cpuset`]
    /// (default: the service's whole set).
    pub fn cpuset(mut self, cpus: CpuSet) -> Self {
        self.cpuset = Some(cpus);
        self
    }

    /// Adds a `KEY=VALUE` entry to the worker process's environment.
    pub fn env(mut self, entry: impl Into<String>) -> Self {
        self.env.push(entry.into());
        self
    }

    /// How many commands may be in flight at once (a power of two, default
    /// [`DEFAULT_MAX_INFLIGHT`]); further commands wait for one to finish.
    pub fn max_inflight(mut self, n: u32) -> Self {
        self.max_inflight = n;
        self
    }

    /// Asks the service to spawn (or attach to) the worker and waits until it is running.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] for an unknown plugin, [`ErrorKind::InvalidArgument`] for a
    /// CPU set outside the service's, no plugin, a bad environment entry or a max in-flight
    /// that is not a power of two, [`ErrorKind::ResourceExhausted`] when the service has no
    /// room for another worker, [`ErrorKind::ConnectionLost`] when the service is gone.
    pub async fn start(self) -> Result<Worker> {
        let mut mask = self.plugin_mask;
        for name in &self.plugin_names {
            mask |= self.service.plugin(name)?.id;
        }
        if mask == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "urom.worker: no plugin given"));
        }
        if !self.max_inflight.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("urom.worker: max_inflight {} is not a power of two", self.max_inflight),
            ));
        }
        if let Some(set) = &self.cpuset {
            if set.is_empty() || !set.is_subset(self.service.cpuset()) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("urom.worker: cpuset {set} is not inside the service's {}", self.service.cpuset()),
                ));
            }
        }
        let env: Vec<CString> = self
            .env
            .iter()
            .map(|e| match CString::new(e.as_bytes()) {
                Ok(c) if e.contains('=') && !e.starts_with('=') => Ok(c),
                _ => Err(Error::new(ErrorKind::InvalidArgument, format!("urom.worker: bad env entry {e:?}"))),
            })
            .collect::<Result<_>>()?;

        let svc_ptr = self.service.inner.ctx.as_ptr()?;
        let mut w = std::ptr::null_mut();
        // SAFETY: valid out-pointer; ownership passes to `DocaCtx` below.
        check(unsafe { sys::doca_urom_worker_create(&mut w) }, "urom.worker: create")?;
        // The worker object refers to the service: keep the service until it is destroyed,
        // which the executor may do after this `Worker` is dropped.
        let keep_service = self.service.clone();
        // SAFETY: `w` is a live, unstarted worker created on this thread that only the DocaCtx
        // destroys; its ctx is IDLE and unconnected.
        let ctx = unsafe {
            DocaCtx::new("urom.worker", w, sys::doca_urom_worker_as_ctx(w), move |w| {
                let rc = sys::doca_urom_worker_destroy(w);
                drop(keep_service);
                rc
            })
        }?;
        let env_ptrs: Vec<*mut std::ffi::c_char> = env.iter().map(|c| c.as_ptr().cast_mut()).collect();
        // SAFETY: live, IDLE worker of this thread; the service outlives it (kept above); the
        // env strings are valid for the call, which copies them.
        unsafe {
            check(sys::doca_urom_worker_set_service(w, svc_ptr), "urom.worker: set service")?;
            check(sys::doca_urom_worker_set_id(w, self.id), "urom.worker: set id")?;
            check(sys::doca_urom_worker_set_gid(w, self.gid), "urom.worker: set gid")?;
            check(sys::doca_urom_worker_set_plugins(w, mask), "urom.worker: set plugins")?;
            if let Some(set) = &self.cpuset {
                check(sys::doca_urom_worker_set_cpuset(w, to_doca_cpuset(set)), "urom.worker: set cpuset")?;
            }
            check(sys::doca_urom_worker_set_max_inflight_tasks(w, self.max_inflight), "urom.worker: max in-flight")?;
            if !env_ptrs.is_empty() {
                check(sys::doca_urom_worker_set_env(w, env_ptrs.as_ptr(), env_ptrs.len()), "urom.worker: set env")?;
            }
        }
        crate::trace::event!(info, { id = self.id, gid = self.gid, plugins = mask }, "urom: starting a worker");
        if let Err(e) = ctx.start().await {
            let e = start_error(w, e);
            crate::trace::event!(info, { id = self.id, error = crate::trace::disp(&e) }, "urom: the worker did not start");
            return Err(e);
        }
        let mut id = 0u64;
        let mut gid = 0u32;
        // SAFETY: live, RUNNING worker; valid out-pointers.
        unsafe {
            check(sys::doca_urom_worker_get_id(w, &mut id), "urom.worker: get id")?;
            check(sys::doca_urom_worker_get_gid(w, &mut gid), "urom.worker: get gid")?;
        }
        crate::trace::event!(info, { worker = id, gid = gid, plugins = mask }, "urom: worker running");
        Ok(Worker { inner: Rc::new(WorkerInner { ctx, service: self.service, id, gid, plugins: mask }) })
    }
}

/// The reason a worker did not start. DOCA only reports that the ctx went back to IDLE; the
/// soft provider also keeps the service's answer, which makes a far better error.
fn start_error(w: *mut sys::doca_urom_worker, generic: Error) -> Error {
    #[cfg(feature = "soft")]
    {
        let mut code = sys::DOCA_SUCCESS;
        // SAFETY: live worker (its DocaCtx holds it); valid out-pointer.
        let rc = unsafe { sys::doca_soft_urom_worker_get_start_error(w, &mut code) };
        if rc == sys::DOCA_SUCCESS && code != sys::DOCA_SUCCESS {
            let mut reason = std::ptr::null();
            // SAFETY: live worker; valid out-pointer. The string is owned by the worker and
            // copied before anything else touches it.
            let why = unsafe {
                if sys::doca_soft_urom_worker_get_start_error_reason(w, &mut reason) == sys::DOCA_SUCCESS
                    && !reason.is_null()
                {
                    std::ffi::CStr::from_ptr(reason).to_string_lossy().into_owned()
                } else {
                    String::new()
                }
            };
            let what = if why.is_empty() { "the service refused the worker".to_owned() } else { why };
            return Error::from_doca(code, format!("urom.worker: start: {what}"));
        }
    }
    let _ = w;
    generic.context_prefix("urom.worker")
}

struct WorkerInner {
    ctx: DocaCtx<sys::doca_urom_worker>,
    service: Service,
    id: u64,
    gid: u32,
    plugins: u64,
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // The `DocaCtx` field is dropped right after this: it stops the worker ctx, and the
        // service tears the worker process down.
        crate::trace::event!(info, { worker = self.id }, "urom: last worker handle dropped");
    }
}

/// A running UROM worker, on the current executor.
///
/// [`command`](Worker::command) sends a plugin command (its packed bytes) and resolves with
/// the plugin's packed notification. Commands may be issued concurrently from many tasks; at
/// most [`WorkerBuilder::max_inflight`] are in flight, the others wait.
///
/// `Worker` is a cheap `Rc` handle. Dropping the last handle stops the worker ctx (the service
/// tears the worker process down unless another connection is attached to it); commands in
/// flight then fail with [`ErrorKind::Cancelled`]. A worker process that dies makes its
/// in-flight and later commands fail with [`ErrorKind::ConnectionLost`].
///
/// ```no_run
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::urom::{Service, Worker};
/// let svc = Service::connect(&async_doca::Device::open_default()?).await?;
/// let graph = svc.plugin("worker_graph")?.id;
/// let worker = Worker::builder(&svc).plugin_ids(graph).start().await?;
/// let reply = worker.command(graph, b"packed command").await?;
/// # let _ = reply;
/// worker.stop().await?;
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Worker {
    inner: Rc<WorkerInner>,
}

impl Worker {
    /// The worker context's record: whether DOCA's object still exists (see
    /// `ResultCell::wait_on`).
    pub(crate) fn ctx_record(&self) -> Rc<crate::executor::context::CtxRecord> {
        self.inner.ctx.record().clone()
    }

    /// A builder for a worker of `service`.
    pub fn builder(service: &Service) -> WorkerBuilder {
        WorkerBuilder {
            service: service.clone(),
            id: sys::DOCA_UROM_WORKER_ID_ANY,
            gid: 0,
            plugin_names: Vec::new(),
            plugin_mask: 0,
            cpuset: None,
            env: Vec::new(),
            max_inflight: DEFAULT_MAX_INFLIGHT,
        }
    }

    /// The worker's id (the one the service chose, for a worker started without one).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The worker's group id.
    pub fn gid(&self) -> u32 {
        self.inner.gid
    }

    /// The ids of the plugins the worker loaded (OR-ed).
    pub fn plugins(&self) -> u64 {
        self.inner.plugins
    }

    /// The service the worker belongs to.
    pub fn service(&self) -> &Service {
        &self.inner.service
    }

    pub(crate) fn raw(&self) -> Result<*mut sys::doca_urom_worker> {
        self.inner.ctx.as_ptr()
    }

    /// Sends `payload` (a command packed in the plugin's format) to plugin `plugin` (its id)
    /// and returns the notification the plugin packed in answer.
    ///
    /// # Errors
    /// The status of the plugin's notification when it is not a success (for example
    /// [`ErrorKind::InvalidArgument`] for a malformed command), [`ErrorKind::InvalidArgument`]
    /// for a payload beyond the service's message size or a plugin the worker did not load,
    /// [`ErrorKind::ConnectionLost`] when the worker process died, [`ErrorKind::Cancelled`]
    /// when the worker was stopped.
    pub async fn command(&self, plugin: u64, payload: &[u8]) -> Result<Vec<u8>> {
        let sink = Box::new(Sink::<u8>::default());
        let alloc = self.command_alloc(plugin, payload, &sink)?;
        let op = CommandOp {
            fut: self.inner.ctx.submit_keeping::<Command, _, _>(
                "urom.worker.command",
                alloc,
                None,
                payload.len(),
                sink,
            ),
            _ctx: None,
        };
        let (status, notification) = op.await;
        status.map(|()| notification)
    }

    /// The operation behind [`command`](Worker::command), as a named future that owns its
    /// payload, may be kept beyond this borrow of the worker (its allocation closure keeps a
    /// handle to the worker) and tells when its task has been submitted, so that a caller can
    /// issue commands in a strict order (see [`CommandOp::submitted`]).
    pub(crate) fn command_op_owned(&self, plugin: u64, payload: Vec<u8>) -> Result<OwnedCommandOp> {
        let keep = self.clone();
        let sink = Box::new(Sink::<u8>::default());
        let mut alloc = self.command_alloc(plugin, payload, &sink)?;
        // Boxed (once) so that the future's type can be named and stored.
        let owned: OwnedAlloc = Box::new(move |slot: &TaskSlot| {
            // The worker object `alloc` uses stays alive as long as this closure.
            let _ = &keep;
            alloc(slot)
        });
        let keep_ctx = self.inner.ctx.keep_alive();
        // SAFETY: `keep_ctx` is this context's, and the command keeps it in the field after
        // the future's, so it is dropped after the future.
        let fut = unsafe { self.inner.ctx.submit_owned::<Command, _>(&keep_ctx, "urom.worker.command", owned) };
        Ok(CommandOp { fut: fut.with_buffers(sink), _ctx: Some(keep_ctx) })
    }

    /// The allocation closure of a command task whose answer lands in `sink` (which the
    /// operation must keep alive until the completion: `with_buffers`).
    fn command_alloc<'a, P: AsRef<[u8]> + 'a>(
        &self,
        plugin: u64,
        payload: P,
        sink: &Sink<u8>,
    ) -> Result<impl FnMut(&TaskSlot) -> AllocResult + 'a> {
        if plugin.count_ones() != 1 || self.inner.plugins & plugin == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("urom.worker.command: plugin {plugin:#x} is not one plugin loaded by this worker"),
            ));
        }
        let w = self.inner.ctx.as_ptr()?;
        let word = sink.as_word();
        let alloc = move |slot: &TaskSlot| {
            let mut task = std::ptr::null_mut();
            // SAFETY: live worker; valid out-pointer.
            let rc = unsafe { sys::doca_urom_worker_cmd_task_allocate_init(w, plugin, &mut task) };
            if rc != sys::DOCA_SUCCESS {
                return Err(rc);
            }
            // SAFETY: `task` is the live task just allocated and owned here; its payload
            // buffer is owned by the task. The slot's result area has a stable address and
            // names the sink that `with_buffers` keeps alive until the completion.
            unsafe {
                let rc = write_payload(task, payload.as_ref());
                if rc != sys::DOCA_SUCCESS {
                    sys::doca_urom_worker_cmd_task_release(task);
                    return Err(rc);
                }
                sys::doca_urom_worker_cmd_task_set_cb(task, Some(completion_cb::<Command>));
                sys::doca_task_set_user_data(Command::as_task(task), slot.user_data());
                slot.out_ptr(0).write(word);
            }
            Ok(task)
        };
        Ok(alloc)
    }

    /// Stops the worker ctx and waits until it is idle: the service detaches this connection
    /// and tears the worker down unless another connection is attached. Commands in flight
    /// fail with [`ErrorKind::Cancelled`].
    pub async fn stop(&self) -> Result<()> {
        crate::trace::event!(info, { worker = self.inner.id }, "urom: stopping the worker");
        let r = self.inner.ctx.stop().await;
        crate::trace::event!(info, { worker = self.inner.id, ok = r.is_ok() }, "urom: worker stopped");
        r
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("id", &format_args!("{:#x}", self.inner.id))
            .field("gid", &self.inner.gid)
            .field("plugins", &format_args!("{:#x}", self.inner.plugins))
            .field("ctx", &self.inner.ctx)
            .finish()
    }
}

/// What a command task's allocation closure returns.
type AllocResult = std::result::Result<*mut sys::doca_urom_worker_cmd_task, sys::doca_error_t>;
/// The boxed allocation closure of an [`OwnedCommandOp`].
type OwnedAlloc = Box<dyn FnMut(&TaskSlot) -> AllocResult>;
/// A command future that can be stored (see [`Worker::command_op_owned`]).
pub(crate) type OwnedCommandOp = CommandOp<'static, OwnedAlloc>;

/// One worker command: resolves to its status and the plugin's packed notification (see
/// [`Worker::command`]). Like every DOCA operation it is lazy (submitted at its first poll),
/// and dropping it after submission discards the answer without cancelling the command.
#[must_use = "a command does nothing unless polled"]
pub(crate) struct CommandOp<'a, A> {
    fut: BufTaskFuture<'a, Command, A, Box<Sink<u8>>>,
    /// What an owned command's future borrows (`None` for a borrowing one): declared after
    /// `fut`, so dropped after it (see `DocaCtx::submit_owned`).
    _ctx: Option<CtxKeepAlive>,
}

impl<A> CommandOp<'_, A> {
    /// Whether the command's task was handed to DOCA (or the operation is over). Commands of
    /// one worker reach its plugin in submission order.
    pub(crate) fn submitted(&self) -> bool {
        self.fut.submitted()
    }
}

impl<A: FnMut(&TaskSlot) -> AllocResult> Future for CommandOp<'_, A> {
    /// The command's status and the plugin's notification, which a failed command may carry
    /// too (the plugin's explanation; empty when the worker never answered).
    type Output = (Result<()>, Vec<u8>);

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.get_mut().fut).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready((r, sink)) => Poll::Ready((r.map(drop), sink.take())),
        }
    }
}

/// Copies `payload` into the task's payload buffer (capacity: the service's message size).
///
/// # Safety
/// `task` is a live command task owned by the caller.
unsafe fn write_payload(task: *mut sys::doca_urom_worker_cmd_task, payload: &[u8]) -> sys::doca_error_t {
    // SAFETY: live task (caller); its payload buffer lives as long as the task.
    unsafe {
        let buf = sys::doca_urom_worker_cmd_task_get_payload(task);
        if buf.is_null() {
            return sys::DOCA_ERROR_UNEXPECTED;
        }
        let mut head = std::ptr::null_mut();
        let mut cap = 0usize;
        let rc = sys::doca_buf_get_head(buf, &mut head);
        if rc != sys::DOCA_SUCCESS {
            return rc;
        }
        let rc = sys::doca_buf_get_len(buf, &mut cap);
        if rc != sys::DOCA_SUCCESS {
            return rc;
        }
        if payload.len() > cap {
            return sys::DOCA_ERROR_TOO_BIG;
        }
        // The buffer's memory belongs to the task and nothing else writes it before submit.
        std::ptr::copy_nonoverlapping(payload.as_ptr(), head.cast::<u8>(), payload.len());
        sys::doca_buf_set_data(buf, head, payload.len())
    }
}

/// `doca_urom_worker_cmd_task`; the packed notification is copied into the operation's sink.
struct Command;

// SAFETY: the conversion and the release are the task type's own.
unsafe impl DocaTask for Command {
    // An answer comes from another process (a worker, the service).
    const REMOTE: bool = true;

    type Task = sys::doca_urom_worker_cmd_task;

    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live task.
        unsafe { sys::doca_urom_worker_cmd_task_as_task(task) }
    }

    unsafe fn on_complete(task: *mut Self::Task, _status: sys::doca_error_t, out: &mut TaskOutput) {
        // A failed command's notification is copied too: plugins explain failures in it.
        // SAFETY: live, completed task (caller); its response buffer lives until release.
        unsafe {
            let buf = sys::doca_urom_worker_cmd_task_get_response(task);
            if buf.is_null() {
                return;
            }
            let mut data = std::ptr::null_mut();
            let mut len = 0usize;
            if sys::doca_buf_get_data(buf, &mut data) != sys::DOCA_SUCCESS
                || sys::doca_buf_get_data_len(buf, &mut len) != sys::DOCA_SUCCESS
            {
                return;
            }
            let bytes =
                if len == 0 || data.is_null() { &[][..] } else { std::slice::from_raw_parts(data.cast::<u8>(), len) };
            // Word 0 names the sink the allocation closure set up, kept alive by the future.
            Sink::fill(out, bytes);
        }
    }

    unsafe fn free(task: *mut Self::Task) {
        // SAFETY: the caller passes a live task it owns.
        unsafe { sys::doca_urom_worker_cmd_task_release(task) };
    }
}
