//! One build at a time in a checkout, while QEMUs run side by side.
//!
//! Builds write into places that every build shares: cargo's output directory (one `keel` ELF,
//! whatever the configuration), `target/keel/<name>/` (two scenarios may build the same
//! configuration), the guests' images, and the Debian cache, whose partial files are named by
//! process id. The scenarios that run at once, and any other xtask of this checkout (such as the
//! `cargo xtask build` a scenario starts), take turns here: the lock is a `flock` on
//! `target/keel/build.lock`, taken by each thread that builds and held until its build ends.
//! A build inside a build (an image whose configuration names a Debian initramfs) runs under the
//! lock its thread already holds.

use std::cell::Cell;
use std::fs::File;

use crate::image::output_dir;
use crate::Result;

thread_local! {
    /// How many [`exclusive`] calls this thread is inside: the lock is held while it is not 0.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Runs `build` holding the build lock (waiting for it if another thread or process of this
/// checkout holds it); `build` may itself call [`exclusive`].
pub fn exclusive<T>(build: impl FnOnce() -> Result<T>) -> Result<T> {
    if DEPTH.get() > 0 {
        DEPTH.set(DEPTH.get() + 1);
        let result = build();
        DEPTH.set(DEPTH.get() - 1);
        return result;
    }
    let directory = output_dir();
    std::fs::create_dir_all(&directory).map_err(|e| format!("{}: {e}", directory.display()))?;
    let path = directory.join("build.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("the build lock {}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("the build lock {}: {e}", path.display()))?;
    DEPTH.set(1);
    let result = build();
    DEPTH.set(0);
    // Closing the file releases the lock.
    drop(file);
    result
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn builds_take_turns_and_a_build_inside_a_build_runs() {
        let inside = AtomicU32::new(0);
        let most = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    exclusive(|| {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(30));
                        let nested = exclusive(|| Ok(7));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        nested
                    })
                    .unwrap()
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert_eq!(
            exclusive(|| Err::<(), _>("why".to_string())),
            Err("why".into())
        );
    }
}
