"""LBT-IPC for router.um: a source's messages go through a shared-memory ring (router/ipc) to the
receivers on the same host, with no sockets on the data path. The TIR's LBT-IPC block
(host_id, session_id, xport_id) names the ring; receivers attach to it and read."""
