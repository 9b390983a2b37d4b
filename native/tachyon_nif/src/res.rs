//! Resource types for the hot NIFs, with a decode that costs one
//! `enif_get_resource`.
//!
//! rustler's resources find their `ErlNifResourceType` by `TypeId` in a
//! SipHash `HashMap` on every decode: 25-30 ns of a ~60 ns empty NIF call
//! with a resource argument on this machine, paid by every
//! `Tachyon.Store.append/2`. The types here keep their `ErlNifResourceType`
//! pointer in a static of their own, written once in the NIF's `load`
//! callback ([`register`]).
//!
//! [`Handle<T>`] is the counterpart of `rustler::ResourceArc<T>`: one
//! reference to a resource object holding a `T` (kept and released with
//! `enif_keep_resource` / `enif_release_resource`; the object, and so the
//! `T`, is dropped when the last reference, Rust or Erlang, is gone). A NIF
//! argument of type `&T` borrows the object for the call. Declare a type
//! with [`hot_resource!`].

use std::ffi::CStr;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ops::Deref;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use rustler::sys::{
    c_void, enif_alloc_resource, enif_get_resource, enif_keep_resource, enif_make_resource,
    enif_monitor_process, enif_open_resource_type_x, enif_release_resource, ErlNifEnv,
    ErlNifMonitor, ErlNifPid, ErlNifResourceDown, ErlNifResourceDtor, ErlNifResourceFlags,
    ErlNifResourceStop, ErlNifResourceType, ErlNifResourceTypeInit,
};
use rustler::{Encoder, Env, Error, LocalPid, Monitor, NifResult, Term};

/// A Rust type stored in a BEAM resource object.
pub trait HotResource: Sized + Send + Sync + 'static {
    /// The resource type's name (unique within the NIF library).
    const NAME: &'static CStr;
    /// Whether [`HotResource::down`] is registered as the `down` callback
    /// (needed by [`Handle::monitor`]).
    const DOWN: bool = false;

    /// The static that holds the type pointer ([`hot_resource!`] makes it).
    fn type_slot() -> &'static AtomicPtr<ErlNifResourceType>;

    /// Whether [`HotResource::stop`] is registered as the `stop` callback
    /// (needed to take a descriptor out of the VM's poll set with
    /// [`select_stop`]).
    const STOP: bool = false;

    /// A process monitored with [`Handle::monitor`] went down. `this` also
    /// gives the resource object (for `enif_` calls such as a select stop).
    fn down(_this: &Obj<'_, Self>, _env: Env<'_>, _pid: LocalPid, _monitor: Monitor) {}

    /// The VM no longer watches `fd` for this object ([`select_stop`]): it
    /// may be closed now. `direct` when called from within `select_stop`.
    fn stop(&self, _fd: std::os::fd::RawFd, _direct: bool) {}
}

/// Implements [`HotResource`] for a type, and `rustler::Decoder` for `&T`
/// (the NIF argument form):
/// `hot_resource!(StoreResource, c"StoreResource")`, or with a `down`
/// callback (an inherent method with [`HotResource::down`]'s signature):
/// `hot_resource!(AsyncStoreResource, c"AsyncStoreResource", down = on_down)`
/// (`on_down(this: &Obj<Self>, env, pid, monitor)`), and with a `stop`
/// callback too (`stop = on_stop`, `on_stop(&self, fd, direct)`).
#[macro_export]
macro_rules! hot_resource {
    (@slot) => {
        fn type_slot() -> &'static std::sync::atomic::AtomicPtr<rustler::sys::ErlNifResourceType> {
            static SLOT: std::sync::atomic::AtomicPtr<rustler::sys::ErlNifResourceType> =
                std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
            &SLOT
        }
    };
    (@decoder $t:ty) => {
        impl<'a> rustler::Decoder<'a> for &'a $t {
            fn decode(term: rustler::Term<'a>) -> rustler::NifResult<Self> {
                $crate::res::borrow::<$t>(term)
            }
        }
    };
    (@down $t:ty, $f:ident) => {
        fn down(
            this: &$crate::res::Obj<'_, Self>,
            env: rustler::Env<'_>,
            pid: rustler::LocalPid,
            mon: rustler::Monitor,
        ) {
            <$t>::$f(this, env, pid, mon)
        }
    };
    ($t:ty, $name:expr) => {
        impl $crate::res::HotResource for $t {
            const NAME: &'static std::ffi::CStr = $name;
            $crate::hot_resource!(@slot);
        }
        $crate::hot_resource!(@decoder $t);
    };
    ($t:ty, $name:expr, down = $f:ident, stop = $g:ident) => {
        impl $crate::res::HotResource for $t {
            const NAME: &'static std::ffi::CStr = $name;
            const DOWN: bool = true;
            const STOP: bool = true;
            $crate::hot_resource!(@slot);
            $crate::hot_resource!(@down $t, $f);
            fn stop(&self, fd: std::os::fd::RawFd, direct: bool) {
                <$t>::$g(self, fd, direct)
            }
        }
        $crate::hot_resource!(@decoder $t);
    };
    ($t:ty, $name:expr, down = $f:ident) => {
        impl $crate::res::HotResource for $t {
            const NAME: &'static std::ffi::CStr = $name;
            const DOWN: bool = true;
            $crate::hot_resource!(@slot);
            $crate::hot_resource!(@down $t, $f);
        }
        $crate::hot_resource!(@decoder $t);
    };
}

/// Opens the resource type of `T`. Call it once for every type, from the
/// NIF library's `load` callback only (the only place `env` allows it).
pub fn register<T: HotResource>(env: Env<'_>) -> bool {
    let init = ErlNifResourceTypeInit {
        dtor: destructor::<T> as *const ErlNifResourceDtor,
        stop: if T::STOP {
            stop::<T> as *const ErlNifResourceStop
        } else {
            ptr::null()
        },
        down: if T::DOWN {
            down::<T> as *const ErlNifResourceDown
        } else {
            ptr::null()
        },
    };
    let mut tried = MaybeUninit::uninit();
    // SAFETY: `env` is the load callback's environment (rustler hands it
    // to `load` only); the name is a NUL-terminated static string and
    // `init` outlives the call (ERTS copies it).
    let typ = unsafe {
        enif_open_resource_type_x(
            env.as_c_arg(),
            T::NAME.as_ptr(),
            &init,
            ErlNifResourceFlags::ERL_NIF_RT_CREATE,
            tried.as_mut_ptr(),
        )
    };
    if typ.is_null() {
        return false;
    }
    T::type_slot().store(typ as *mut ErlNifResourceType, Ordering::Release);
    true
}

fn resource_type<T: HotResource>() -> *const ErlNifResourceType {
    T::type_slot().load(Ordering::Acquire)
}

/// Bytes allocated for a `T`: ERTS aligns resource data to 8 bytes only, so
/// room is left to align a `T` with a larger alignment (cache-padded
/// fields).
const fn alloc_size<T>() -> usize {
    size_of::<T>() + align_of::<T>()
}

/// The `T` inside the resource object `obj` (see [`alloc_size`]).
fn data_ptr<T>(obj: *const c_void) -> *mut T {
    let addr = obj as usize;
    let offset = (align_of::<T>() - addr % align_of::<T>()) % align_of::<T>();
    (addr + offset) as *mut T
}

unsafe extern "C" fn destructor<T: HotResource>(_env: *mut ErlNifEnv, obj: *mut c_void) {
    // A panic must not unwind into ERTS.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: ERTS calls the destructor once, after the last reference
        // is gone, on an object `Handle::new` initialised with a `T` at
        // `data_ptr`.
        unsafe { ptr::drop_in_place(data_ptr::<T>(obj)) };
    });
}

unsafe extern "C" fn down<T: HotResource>(
    env: *mut ErlNifEnv,
    obj: *mut c_void,
    pid: *const ErlNifPid,
    mon: *const ErlNifMonitor,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: ERTS passes a live object of this type (the monitor holds
        // no reference, but the object is alive during the callback), a
        // callback environment and valid pid and monitor pointers.
        unsafe {
            let env = Env::new(&env, env);
            let this = Obj {
                obj,
                res: &*data_ptr::<T>(obj),
            };
            T::down(
                &this,
                env,
                LocalPid::from_c_arg(*pid),
                Monitor::from_c_arg(*mon),
            );
        }
    });
}

unsafe extern "C" fn stop<T: HotResource>(
    _env: *mut ErlNifEnv,
    obj: *mut c_void,
    fd: rustler::sys::ErlNifEvent,
    is_direct_call: std::ffi::c_int,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: ERTS passes a live object of this type (the select holds
        // no reference, but the object is alive during the callback).
        let res = unsafe { &*data_ptr::<T>(obj) };
        res.stop(fd, is_direct_call != 0);
    });
}

// enif_select flags (erl_drv_nif.h; rustler's constants mix in return values).
const SELECT_READ: rustler::sys::ErlNifSelectFlags = 1 << 0;
const SELECT_STOP: rustler::sys::ErlNifSelectFlags = 1 << 2;
const SELECT_CUSTOM_MSG: rustler::sys::ErlNifSelectFlags = 1 << 4;

fn monitor_object<T: HotResource>(
    obj: *const c_void,
    env: Env<'_>,
    pid: &LocalPid,
) -> Option<Monitor> {
    if !T::DOWN {
        return None;
    }
    let mut mon = MaybeUninit::uninit();
    // SAFETY: a live object of a type registered with a down callback;
    // `env` is the calling NIF's environment.
    let r = unsafe { enif_monitor_process(env.as_c_arg(), obj, pid.as_c_arg(), mon.as_mut_ptr()) };
    // SAFETY: 0 means ERTS initialised `mon`.
    (r == 0).then(|| Monitor::from_c_arg(unsafe { mon.assume_init() }))
}

/// A borrowed resource argument that also knows its resource object (for
/// `enif_` calls on the object, such as `enif_select`), without taking a
/// reference: valid for the NIF call, like `&T`.
pub struct Obj<'a, T: HotResource> {
    obj: *const c_void,
    res: &'a T,
}

impl<T: HotResource> Deref for Obj<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.res
    }
}

impl<'a, T: HotResource> rustler::Decoder<'a> for Obj<'a, T> {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        let obj = object::<T>(term)?;
        // SAFETY: a resource of this type holds an initialised `T` at
        // `data_ptr`, alive at least as long as the term ('a).
        let res = unsafe { &*data_ptr::<T>(obj) };
        Ok(Obj { obj, res })
    }
}

impl<T: HotResource> Obj<'_, T> {
    /// A new reference to the object (a handle to keep beyond the call).
    pub fn handle(&self) -> Handle<T> {
        // SAFETY: a live object (the call's term holds it); the handle owns
        // the reference taken here.
        unsafe { enif_keep_resource(self.obj) };
        Handle {
            obj: self.obj,
            _t: PhantomData,
        }
    }

    /// The object as a term of `env`.
    pub fn to_term<'b>(&self, env: Env<'b>) -> Term<'b> {
        // SAFETY: a live object; the term gets its own reference.
        unsafe { Term::new(env, enif_make_resource(env.as_c_arg(), self.obj)) }
    }

    /// Monitors `pid` for this object: `T::down` runs when it dies.
    pub fn monitor(&self, env: Env<'_>, pid: &LocalPid) -> Option<Monitor> {
        monitor_object::<T>(self.obj, env, pid)
    }

    /// Removes a monitor made by [`Obj::monitor`] or [`Handle::monitor`].
    pub fn demonitor(&self, env: Env<'_>, mon: &Monitor) -> bool {
        // SAFETY: a live object; `env` is the calling NIF's environment.
        unsafe {
            rustler::sys::enif_demonitor_process(env.as_c_arg(), self.obj, mon.as_c_arg()) == 0
        }
    }

    /// Asks the VM to send `msg` to `pid` once `fd` is readable (one shot:
    /// ask again after each message). The type must have a `stop` callback.
    /// False if the VM refused.
    pub fn select_read(&self, env: Env<'_>, fd: RawFd, pid: &LocalPid, msg: Term<'_>) -> bool {
        if !T::STOP {
            return false;
        }
        // SAFETY: a live object of a type registered with a stop callback;
        // `env` is the calling NIF's (process-bound) environment, to which
        // `msg` belongs, so no message environment is passed.
        let r = unsafe {
            rustler::sys::enif_select_x(
                env.as_c_arg(),
                fd,
                SELECT_READ | SELECT_CUSTOM_MSG,
                self.obj as *mut c_void,
                pid.as_c_arg(),
                msg.as_c_arg(),
                ptr::null_mut(),
            )
        };
        r >= 0
    }

    /// Takes `fd` out of the VM's poll set; `T::stop` is called (now, or
    /// once the VM's poll thread let go of it) and only then may `fd` be
    /// closed. False if the VM refused (`fd` was never selected).
    pub fn select_stop(&self, env: Env<'_>, fd: RawFd) -> bool {
        // SAFETY: as in select_read; STOP takes no pid, and a ref term.
        let r = unsafe {
            rustler::sys::enif_select(
                env.as_c_arg(),
                fd,
                SELECT_STOP,
                self.obj as *mut c_void,
                ptr::null(),
                rustler::sys::enif_make_atom(env.as_c_arg(), c"undefined".as_ptr()),
            )
        };
        r >= 0
    }
}

/// The resource object of a term of `T`'s type; `badarg` otherwise.
fn object<T: HotResource>(term: Term<'_>) -> NifResult<*const c_void> {
    let mut obj: *const c_void = ptr::null();
    // SAFETY: the env and term come from the running NIF call; the type
    // pointer is the one ERTS returned at load (null before load, which
    // ERTS rejects with 0).
    let ok = unsafe {
        enif_get_resource(
            term.get_env().as_c_arg(),
            term.as_c_arg(),
            resource_type::<T>(),
            &mut obj,
        )
    };
    if ok == 0 {
        Err(Error::BadArg)
    } else {
        Ok(obj)
    }
}

/// The `T` of a resource term, borrowed for the NIF call (the term keeps
/// the object alive). `badarg` if the term is not a resource of this type.
pub fn borrow<'a, T: HotResource>(term: Term<'a>) -> NifResult<&'a T> {
    let obj = object::<T>(term)?;
    // SAFETY: a resource of this type holds an initialised `T` at
    // `data_ptr`, alive at least as long as the term ('a).
    Ok(unsafe { &*data_ptr::<T>(obj) })
}

/// One reference to a resource object holding a `T`.
pub struct Handle<T: HotResource> {
    obj: *const c_void,
    _t: PhantomData<T>,
}

// SAFETY: the object is shared by reference counting in ERTS (thread-safe
// keep/release) and `T` is `Send + Sync`.
unsafe impl<T: HotResource> Send for Handle<T> {}
// SAFETY: as above; `&Handle<T>` only gives `&T`.
unsafe impl<T: HotResource> Sync for Handle<T> {}

impl<T: HotResource> Handle<T> {
    /// Moves `value` into a new resource object.
    pub fn new(value: T) -> Self {
        let typ = resource_type::<T>();
        assert!(!typ.is_null(), "resource type used before load");
        // SAFETY: a registered type; the size leaves room for alignment.
        let obj = unsafe { enif_alloc_resource(typ, alloc_size::<T>()) };
        // SAFETY: `obj` points to `alloc_size::<T>()` fresh bytes, so the
        // aligned `T` slot fits; it is written before anything reads it.
        unsafe { ptr::write(data_ptr::<T>(obj), value) };
        Handle {
            obj: obj as *const c_void,
            _t: PhantomData,
        }
    }

    /// Monitors `pid` for this object: `T::down` runs when it dies.
    pub fn monitor(&self, env: Env<'_>, pid: &LocalPid) -> Option<Monitor> {
        monitor_object::<T>(self.obj, env, pid)
    }
}

impl<T: HotResource> Deref for Handle<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this handle holds a reference, so the object and its `T`
        // are alive.
        unsafe { &*data_ptr::<T>(self.obj) }
    }
}

impl<T: HotResource> Clone for Handle<T> {
    fn clone(&self) -> Self {
        // SAFETY: a live object (this handle holds a reference).
        unsafe { enif_keep_resource(self.obj) };
        Handle {
            obj: self.obj,
            _t: PhantomData,
        }
    }
}

impl<T: HotResource> Drop for Handle<T> {
    fn drop(&mut self) {
        // SAFETY: gives back the reference this handle holds.
        unsafe { enif_release_resource(self.obj) };
    }
}

impl<T: HotResource> Encoder for Handle<T> {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        // SAFETY: a live object; the term gets its own reference.
        unsafe { Term::new(env, enif_make_resource(env.as_c_arg(), self.obj)) }
    }
}

impl<'a, T: HotResource> rustler::Decoder<'a> for Handle<T> {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        let obj = object::<T>(term)?;
        // SAFETY: a live object (the term holds it); the handle owns the
        // reference taken here.
        unsafe { enif_keep_resource(obj) };
        Ok(Handle {
            obj,
            _t: PhantomData,
        })
    }
}
