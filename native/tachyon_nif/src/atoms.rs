//! Atoms shared by every NIF module.

rustler::atoms! {
    ok,
    error,
    nil,
    closed,
    not_found,
    empty,
    enospc,
    eio,
    locked,
    corrupt,
    read_only,
    full,
    busy,
    badarg,
    io,
    not_a_store,
    exists,
    too_large,
}
