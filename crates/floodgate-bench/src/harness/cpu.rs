//! The CPU a system under test spends, from the kernel's scheduler statistics
//! (`/proc/<pid>/task/<tid>/schedstat`: nanoseconds run on a CPU, nanoseconds spent runnable
//! while waiting for one, and timeslices).
//!
//! On a shared host a latency is the system's own work plus every wait the host imposes, and two
//! systems measured a few seconds apart meet different waits. The time a system's threads ran is
//! its own cost whatever the host did meanwhile, and the time they waited runnable is the host's
//! share of its latency: together they say whether a tail came from the system or from around it.
//! A thread that ends between two readings takes the time it ran since the first out of the
//! difference; the servers measured here keep their threads.

use std::path::PathBuf;

/// Whose threads are read.
#[derive(Debug, Clone)]
pub(crate) enum Tasks {
    /// Every thread of a process.
    Process(u32),
    /// Every thread of a process and of each of its children (nginx: the master and its workers).
    WithChildren(u32),
    /// One thread of this process, by its id.
    Thread(u32),
}

/// What threads have spent, summed, since they started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cpu {
    /// Time run on a CPU, in nanoseconds.
    pub(crate) ran_ns: u64,
    /// Time runnable but waiting for a CPU, in nanoseconds.
    pub(crate) waited_ns: u64,
}

impl Cpu {
    /// What was spent from `before` to `self` (each count saturating at zero: a thread that ended
    /// meanwhile takes its time out of the sum).
    pub(crate) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            ran_ns: self.ran_ns.saturating_sub(before.ran_ns),
            waited_ns: self.waited_ns.saturating_sub(before.waited_ns),
        }
    }

    /// `self` and `other` added.
    pub(crate) fn plus(self, other: Cpu) -> Cpu {
        Cpu { ran_ns: self.ran_ns + other.ran_ns, waited_ns: self.waited_ns + other.waited_ns }
    }
}

/// One thread's `schedstat` line, `<ran ns> <waited ns> <timeslices>`; `None` when it does not
/// read as those three numbers (the reading is then unknown, shown as `-`).
pub(crate) fn parse_schedstat(line: &str) -> Option<Cpu> {
    let mut fields = line.split_ascii_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next(), fields.next(), fields.next()) {
        (Some(Ok(ran_ns)), Some(Ok(waited_ns)), Some(Ok(_)), None) => Some(Cpu { ran_ns, waited_ns }),
        _ => None,
    }
}

/// The parent's id on a `/proc/<pid>/stat` line (the field after the state, which follows the
/// command's closing parenthesis; the command may itself hold spaces and parentheses).
pub(crate) fn parent_of(stat: &str) -> Option<u32> {
    let (_, after) = stat.rsplit_once(')')?;
    after.split_ascii_whitespace().nth(1)?.parse().ok()
}

impl Tasks {
    /// What the threads have spent now; `None` when none of them can be read (the process is
    /// gone, or this kernel keeps no scheduler statistics) or a page does not read as one (a
    /// figure short of a thread would be wrong, where none is only missing). A thread that ended
    /// since its directory was listed is left out.
    pub(crate) fn now(&self) -> Option<Cpu> {
        let mut threads = Vec::new();
        match *self {
            Tasks::Process(pid) => threads_of(pid, &mut threads),
            Tasks::WithChildren(pid) => {
                threads_of(pid, &mut threads);
                for child in children_of(pid) {
                    threads_of(child, &mut threads);
                }
            }
            Tasks::Thread(tid) => threads.push(PathBuf::from(format!("/proc/self/task/{tid}"))),
        }
        let mut sum = None;
        for thread in threads {
            let Ok(line) = std::fs::read_to_string(thread.join("schedstat")) else { continue };
            let cpu = parse_schedstat(&line)?;
            sum = Some(cpu.plus(sum.unwrap_or_default()));
        }
        sum
    }
}

/// The thread directories of process `pid`, added to `out`.
fn threads_of(pid: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
    out.extend(entries.filter_map(Result::ok).map(|e| e.path()));
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).ok().and_then(|s| parent_of(&s)) == Some(pid)
        })
        .collect()
}

/// The id of the calling thread (from `/proc/thread-self`, which links to `<pid>/task/<tid>`).
pub(crate) fn current_thread() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedstat_line_is_three_numbers_and_anything_else_is_refused() {
        assert_eq!(
            parse_schedstat("145420088 98688743 313\n"),
            Some(Cpu { ran_ns: 145_420_088, waited_ns: 98_688_743 })
        );
        for bad in ["", "1 2", "1 2 3 4", "1 x 3", "-1 2 3"] {
            assert_eq!(parse_schedstat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_parent_is_read_after_the_command_whatever_it_holds() {
        assert_eq!(parent_of("4242 (nginx) S 4200 4242 4242 0 -1"), Some(4200));
        assert_eq!(parent_of("77 (a) b (c) R 1 77 77 0 -1"), Some(1));
        assert_eq!(parent_of("77 (no close"), None);
        assert_eq!(parent_of("77 (x) S"), None);
    }

    #[test]
    fn a_child_process_is_found_by_its_parent() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let children = children_of(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(children.contains(&child.id()), "{children:?} lacks {}", child.id());
    }

    #[test]
    fn what_was_spent_is_the_difference_and_never_below_zero() {
        let before = Cpu { ran_ns: 10, waited_ns: 5 };
        assert_eq!(Cpu { ran_ns: 25, waited_ns: 5 }.since(before), Cpu { ran_ns: 15, waited_ns: 0 });
        assert_eq!(Cpu { ran_ns: 3, waited_ns: 9 }.since(before), Cpu { ran_ns: 0, waited_ns: 4 });
    }

    #[test]
    fn a_thread_that_works_is_seen_to_run() {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(current_thread()).unwrap();
            // Work until told to stop, so that the thread still exists when it is read.
            let mut x = 0u64;
            while done_rx.try_recv().is_err() {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            x
        });
        let tid = tid_rx.recv().unwrap().expect("this thread's id");
        let thread = Tasks::Thread(tid);
        let first = thread.now().expect("its schedstat");
        // Its time on a CPU grows while it spins (each reading waits for the next, not a clock).
        let mut later = first;
        while later.ran_ns == first.ran_ns {
            later = thread.now().expect("its schedstat");
        }
        assert!(later.since(first).ran_ns > 0);
        let process = Tasks::Process(std::process::id()).now().expect("this process's threads");
        assert!(process.ran_ns >= later.ran_ns, "the process holds the thread: {process:?} {later:?}");
        done_tx.send(()).unwrap();
        worker.join().unwrap();
    }
}
