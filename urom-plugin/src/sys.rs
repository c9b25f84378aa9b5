// The plugin ABI's value types, from the same source files `doca-sys` and `doca-soft` include,
// so the three crates cannot drift apart. `types.rs` names opaque DOCA objects in its callback
// types; none of them is used by a plugin, so empty stand-ins satisfy it here.

mod opaque {
    macro_rules! opaque {
        ($($name:ident),* $(,)?) => {$(
            #[allow(non_camel_case_types, dead_code)]
            pub enum $name {}
        )*};
    }
    opaque!(
        doca_task,
        doca_ctx,
        doca_sync_event_task_get,
        doca_sync_event_task_notify_set,
        doca_sync_event_task_notify_add,
        doca_sync_event_task_wait_eq,
        doca_sync_event_task_wait_neq,
        doca_rdma_task_receive,
        doca_rdma_task_send,
        doca_rdma_task_send_imm,
        doca_rdma_task_read,
        doca_rdma_task_write,
        doca_rdma_task_write_imm,
        doca_rdma_task_atomic_cmp_swp,
        doca_rdma_task_atomic_fetch_add,
        doca_rdma_connection,
        doca_rdma_task_remote_net_sync_event_get,
        doca_rdma_task_remote_net_sync_event_notify_set,
        doca_rdma_task_remote_net_sync_event_notify_add,
    );
}
use opaque::*;

include!("../../doca-sys/src/types.rs");
include!("../../doca-sys/src/urom_plugin.rs");
