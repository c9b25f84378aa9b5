//! The UROM service: the connection to the daemon that spawns and serves workers.

use std::fmt;
use std::rc::Rc;

use super::sink::Sink;
use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::CpuSet;
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, DocaTask, TaskOutput};
use crate::sys;

/// One plugin the service offers (`doca_urom_service_plugin_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    /// The plugin's id: a single bit. Commands name their plugin by it, and a worker's plugin
    /// set is the OR of the ids it loads.
    pub id: u64,
    /// The version the plugin reports.
    pub version: u64,
    /// The plugin's name: its file name without `.so` (`worker_graph`).
    pub name: String,
}

/// Configures and connects a [`Service`].
///
/// ```no_run
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::urom::Service;
/// let dev = async_doca::Device::open_default()?;
/// let svc = Service::builder(&dev).max_message_size(8192).connect().await?;
/// for p in svc.plugins() {
///     println!("{} (id {:#x}, version {})", p.name, p.id, p.version);
/// }
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .connect() is awaited"]
pub struct ServiceBuilder {
    dev: Device,
    max_msg_size: Option<usize>,
    max_workers: Option<u32>,
    #[cfg(feature = "soft")]
    socket: Option<std::path::PathBuf>,
}

impl ServiceBuilder {
    /// The largest command payload or notification, in bytes (DOCA's default is 4096). The
    /// service may lower it to its own limit.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_msg_size = Some(bytes);
        self
    }

    /// How many workers this service connection may have at once.
    pub fn max_workers(mut self, n: u32) -> Self {
        self.max_workers = Some(n);
        self
    }

    /// Soft provider only: connect to the daemon listening on this Unix socket instead of the
    /// one named by `DOCA_UROM_SERVICE_FILE` or the default path. On hardware the service is
    /// always found through the service file.
    #[cfg(feature = "soft")]
    pub fn socket_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.socket = Some(path.into());
        self
    }

    /// Connects to the service (starts the service ctx) on the current executor.
    ///
    /// # Errors
    /// [`ErrorKind::ConnectionLost`] when no service answers, [`ErrorKind::PermissionDenied`]
    /// when it refuses this user, [`ErrorKind::NotFound`] when the service file has no line
    /// for this host and device, [`ErrorKind::BadState`] outside an executor.
    pub async fn connect(self) -> Result<Service> {
        let mut svc = std::ptr::null_mut();
        // SAFETY: valid out-pointer; ownership passes to `DocaCtx` below.
        check(unsafe { sys::doca_urom_service_create(&mut svc) }, "urom.service: create")?;
        let keep_dev = self.dev.clone();
        // SAFETY: `svc` is a live, unstarted service created on this thread that only the
        // DocaCtx destroys; its ctx is IDLE and unconnected. The destroy closure keeps the
        // device open until the service is gone.
        let ctx = unsafe {
            DocaCtx::new("urom.service", svc, sys::doca_urom_service_as_ctx(svc), move |svc| {
                let rc = sys::doca_urom_service_destroy(svc);
                drop(keep_dev);
                rc
            })
        }?;
        // SAFETY: live, IDLE service of this thread; the device outlives it (kept above).
        unsafe {
            check(sys::doca_urom_service_set_dev(svc, self.dev.as_ptr()), "urom.service: set device")?;
            if let Some(n) = self.max_msg_size {
                check(sys::doca_urom_service_set_max_comm_msg_size(svc, n), "urom.service: max message size")?;
            }
            if let Some(n) = self.max_workers {
                check(sys::doca_urom_service_set_max_workers(svc, n), "urom.service: max workers")?;
            }
        }
        #[cfg(feature = "soft")]
        if let Some(path) = &self.socket {
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| Error::new(ErrorKind::InvalidArgument, "urom.service: socket path contains NUL"))?;
            check(
                // SAFETY: live, IDLE service; `c` is a NUL-terminated string the call copies.
                unsafe { sys::doca_soft_urom_service_set_socket_path(svc, c.as_ptr()) },
                "urom.service: socket path",
            )?;
        }
        ctx.start().await.map_err(|e| e.context_prefix("urom.service: connect"))?;
        let (plugins, cpuset) = read_service_info(svc)?;
        Ok(Service { inner: Rc::new(ServiceInner { ctx, dev: self.dev, plugins, cpuset }) })
    }
}

/// Reads the plugin list and CPU set of a RUNNING service.
fn read_service_info(svc: *mut sys::doca_urom_service) -> Result<(Vec<PluginInfo>, CpuSet)> {
    let mut list = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: live, RUNNING service; valid out-pointers.
    let rc = unsafe { sys::doca_urom_service_get_plugins_list(svc, &mut list, &mut count) };
    // NOT_FOUND: DOCA's answer for a service with no plugins, which is still a service.
    if rc != sys::DOCA_ERROR_NOT_FOUND {
        check(rc, "urom.service: plugins")?;
    } else {
        count = 0;
    }
    let raw = if count == 0 || list.is_null() {
        &[][..]
    } else {
        // SAFETY: DOCA returned `count` entries owned by the running service; they are copied
        // before anything else touches the service.
        unsafe { std::slice::from_raw_parts(list, count) }
    };
    let plugins = raw
        .iter()
        .map(|p| {
            let bytes: Vec<u8> = p.plugin_name.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
            PluginInfo { id: p.id, version: p.version, name: String::from_utf8_lossy(&bytes).into_owned() }
        })
        .collect();
    let mut set = sys::doca_cpu_set_t::empty();
    // SAFETY: live, RUNNING service; valid out-pointer.
    check(unsafe { sys::doca_urom_service_get_cpuset(svc, &mut set) }, "urom.service: cpuset")?;
    let cpuset = CpuSet::from_cpus((0..sys::DOCA_CPU_SETSIZE).filter(|c| set.is_set(*c)))?;
    Ok((plugins, cpuset))
}

pub(crate) struct ServiceInner {
    pub(crate) ctx: DocaCtx<sys::doca_urom_service>,
    dev: Device,
    plugins: Vec<PluginInfo>,
    cpuset: CpuSet,
}

/// A connection to the UROM service, on the current executor.
///
/// The service spawns [`Worker`](super::Worker)s (processes on the DPU; on the soft provider,
/// processes forked by `async-doca urom-service` on this machine) and answers queries about
/// them. `Service` is a cheap `Rc` handle: workers keep a clone, so the connection lives as
/// long as any of them. Dropping the last handle disconnects; the service then tears down
/// every worker this connection created that nobody else is attached to.
///
/// ```no_run
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::urom::{Service, Worker};
/// let dev = async_doca::Device::open_default()?;
/// let svc = Service::connect(&dev).await?;
/// let w = Worker::builder(&svc).plugin("worker_graph").gid(7).start().await?;
/// assert_eq!(svc.workers_by_gid(7).await?, vec![w.id()]);
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Service {
    pub(crate) inner: Rc<ServiceInner>,
}

impl Service {
    /// A builder for a service connection on `dev`.
    pub fn builder(dev: &Device) -> ServiceBuilder {
        ServiceBuilder {
            dev: dev.clone(),
            max_msg_size: None,
            max_workers: None,
            #[cfg(feature = "soft")]
            socket: None,
        }
    }

    /// Connects with the default settings (see [`ServiceBuilder::connect`]).
    pub async fn connect(dev: &Device) -> Result<Service> {
        Self::builder(dev).connect().await
    }

    /// The plugins the service offers.
    pub fn plugins(&self) -> &[PluginInfo] {
        &self.inner.plugins
    }

    /// The plugin called `name`.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] when the service has no such plugin.
    pub fn plugin(&self, name: &str) -> Result<&PluginInfo> {
        self.inner.plugins.iter().find(|p| p.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.inner.plugins.iter().map(|p| p.name.as_str()).collect();
            Error::new(ErrorKind::NotFound, format!("urom.service: no plugin `{name}` (the service has {known:?})"))
        })
    }

    /// The CPUs the service may run workers on; a worker's CPU set must lie inside it.
    pub fn cpuset(&self) -> &CpuSet {
        &self.inner.cpuset
    }

    /// The device the service was connected through.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The ids of the live workers in group `gid` (on this service, from any host process).
    ///
    /// # Errors
    /// [`ErrorKind::ConnectionLost`] when the service went away.
    pub async fn workers_by_gid(&self, gid: u32) -> Result<Vec<u64>> {
        let svc = self.inner.ctx.as_ptr()?;
        let sink = Box::new(Sink::<u64>::default());
        let word = sink.as_word();
        let (r, sink) = self
            .inner
            .ctx
            .submit::<ByGid, _>("urom.service.workers_by_gid", |slot| {
                let mut task = std::ptr::null_mut();
                // SAFETY: live, RUNNING service; the callback has the exact C type.
                let rc = unsafe {
                    sys::doca_urom_service_get_workers_by_gid_task_allocate_init(
                        svc,
                        gid,
                        Some(completion_cb::<ByGid>),
                        &mut task,
                    )
                };
                if rc != sys::DOCA_SUCCESS {
                    return Err(rc);
                }
                // SAFETY: `task` is the live task just allocated; the slot's result area has a
                // stable address, and the sink it names is kept alive by `with_buffers`.
                unsafe {
                    sys::doca_task_set_user_data(ByGid::as_task(task), slot.user_data());
                    slot.out_ptr(0).write(word);
                }
                Ok(task)
            })
            .with_buffers(sink)
            .await;
        r?;
        Ok(sink.take())
    }
}

impl fmt::Debug for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Service")
            .field("ctx", &self.inner.ctx)
            .field("plugins", &self.inner.plugins)
            .field("cpuset", &self.inner.cpuset)
            .finish()
    }
}

/// `doca_urom_service_get_workers_by_gid_task`; the ids are copied into the operation's sink.
struct ByGid;

// SAFETY: the conversion and the release are the task type's own.
unsafe impl DocaTask for ByGid {
    // An answer comes from another process (a worker, the service).
    const REMOTE: bool = true;

    type Task = sys::doca_urom_service_get_workers_by_gid_task;

    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live task.
        unsafe { sys::doca_urom_service_get_workers_by_gid_task_as_task(task) }
    }

    unsafe fn on_complete(task: *mut Self::Task, status: sys::doca_error_t, out: &mut TaskOutput) {
        if status != sys::DOCA_SUCCESS {
            return;
        }
        // SAFETY: live, completed task (caller); the ids are owned by the task until release.
        unsafe {
            let n = sys::doca_urom_service_get_workers_by_gid_task_get_workers_count(task);
            let ids = sys::doca_urom_service_get_workers_by_gid_task_get_worker_ids(task);
            let ids = if n == 0 || ids.is_null() { &[][..] } else { std::slice::from_raw_parts(ids, n) };
            // Word 0 names the sink the allocation closure set up, kept alive by the future.
            Sink::fill(out, ids);
        }
    }

    unsafe fn free(task: *mut Self::Task) {
        // SAFETY: the caller passes a live task it owns.
        unsafe { sys::doca_urom_service_get_workers_by_gid_task_release(task) };
    }
}

/// Converts a CPU set to DOCA's bitmask.
pub(crate) fn to_doca_cpuset(set: &CpuSet) -> sys::doca_cpu_set_t {
    let mut out = sys::doca_cpu_set_t::empty();
    for cpu in set.iter() {
        out.set(cpu);
    }
    out
}
