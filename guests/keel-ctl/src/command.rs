//! `keel`'s command line: a verb and its VM (an id, or a name from the device tree), and for
//! `stats` a vCPU.

use std::fmt;

/// `keel help`, and what a wrong command line is answered with.
pub const USAGE: &str = "\
usage: keel COMMAND
  keel status VM        VM's state, its restarts since boot and its last health event
  keel start VM         start VM from its image (it must be off or stopped)
  keel stop VM          stop VM (every vCPU off, its devices cut off)
  keel restart VM       restart VM from its pristine image
  keel stats VM VCPU    scheduling statistics of VM's vCPU VCPU (on a shared pCPU)
  keel resources VM     Keel's resource counters of VM (as at its boot after each restart)
  keel events           print and take the health notices (and messages) queued for this VM
  keel help             this text
VM is a VM's id (as Keel's lines number it) or, for a VM this VM manages, its name.
Exit status: 0 done, 1 refused or failed, 2 a wrong command line, 3 no management window.
";

/// A VM as the command line names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmRef {
    /// By its id.
    Id(u16),
    /// By its name (one of those the device tree lists as managed).
    Name(String),
}

/// What `keel` is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `keel status VM`.
    Status(VmRef),
    /// `keel start VM`.
    Start(VmRef),
    /// `keel stop VM`.
    Stop(VmRef),
    /// `keel restart VM`.
    Restart(VmRef),
    /// `keel stats VM VCPU`.
    Stats {
        /// The VM.
        vm: VmRef,
        /// Its vCPU.
        vcpu: u16,
    },
    /// `keel resources VM`.
    Resources(VmRef),
    /// `keel events`.
    Events,
    /// `keel help`.
    Help,
}

/// A command line `keel` does not understand: what is wrong, as `keel: <this>` prints it.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The command `args` (without the program's name) ask for.
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Command, UsageError> {
    let words: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let Some((&verb, rest)) = words.split_first() else {
        return Err(UsageError("no command given".into()));
    };
    let arity = |count: usize, shape: &str| {
        if rest.len() == count {
            Ok(())
        } else {
            Err(UsageError(format!(
                "'{verb}' takes {shape}, {} given",
                match rest.len() {
                    0 => "nothing".to_string(),
                    1 => "1 argument".to_string(),
                    n => format!("{n} arguments"),
                }
            )))
        }
    };
    let command = match verb {
        "status" | "start" | "stop" | "restart" | "resources" => {
            arity(1, "one VM")?;
            let vm = vm_ref(rest[0])?;
            match verb {
                "status" => Command::Status(vm),
                "start" => Command::Start(vm),
                "stop" => Command::Stop(vm),
                "resources" => Command::Resources(vm),
                _ => Command::Restart(vm),
            }
        }
        "stats" => {
            arity(2, "a VM and a vCPU")?;
            let vcpu = rest[1]
                .parse::<u16>()
                .map_err(|_| UsageError(format!("'{}' is not a vCPU number", rest[1])))?;
            Command::Stats {
                vm: vm_ref(rest[0])?,
                vcpu,
            }
        }
        "events" => {
            arity(0, "nothing")?;
            Command::Events
        }
        "help" | "-h" | "--help" => Command::Help,
        _ => return Err(UsageError(format!("unknown command '{verb}'"))),
    };
    Ok(command)
}

/// A VM's id (decimal, below Keel's own sender id 65535) or its name.
fn vm_ref(word: &str) -> Result<VmRef, UsageError> {
    if word.is_empty() {
        return Err(UsageError("an empty VM name".into()));
    }
    if word.bytes().all(|byte| byte.is_ascii_digit()) {
        return match word.parse::<u16>() {
            Ok(id) if id < keel_core::health::KEEL_SENDER => Ok(VmRef::Id(id)),
            _ => Err(UsageError(format!("'{word}' is not a VM id (0..65534)"))),
        };
    }
    Ok(VmRef::Name(word.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(args: &[&str]) -> String {
        parse(args).unwrap_err().to_string()
    }

    #[test]
    fn every_verb_with_its_arguments() {
        assert_eq!(parse(&["status", "1"]), Ok(Command::Status(VmRef::Id(1))));
        assert_eq!(
            parse(&["restart", "rt"]),
            Ok(Command::Restart(VmRef::Name("rt".into())))
        );
        assert_eq!(parse(&["start", "0"]), Ok(Command::Start(VmRef::Id(0))));
        assert_eq!(parse(&["stop", "12"]), Ok(Command::Stop(VmRef::Id(12))));
        assert_eq!(
            parse(&["stats", "rt", "3"]),
            Ok(Command::Stats {
                vm: VmRef::Name("rt".into()),
                vcpu: 3
            })
        );
        assert_eq!(
            parse(&["resources", "2"]),
            Ok(Command::Resources(VmRef::Id(2)))
        );
        assert_eq!(parse(&["events"]), Ok(Command::Events));
        assert_eq!(parse(&["help"]), Ok(Command::Help));
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
    }

    #[test]
    fn wrong_command_lines_say_what_is_wrong() {
        assert_eq!(error(&[]), "no command given");
        assert_eq!(error(&["reboot", "1"]), "unknown command 'reboot'");
        assert_eq!(error(&["status"]), "'status' takes one VM, nothing given");
        assert_eq!(
            error(&["restart", "1", "2"]),
            "'restart' takes one VM, 2 arguments given"
        );
        assert_eq!(
            error(&["stats", "1"]),
            "'stats' takes a VM and a vCPU, 1 argument given"
        );
        assert_eq!(error(&["stats", "1", "x"]), "'x' is not a vCPU number");
        assert_eq!(
            error(&["events", "now"]),
            "'events' takes nothing, 1 argument given"
        );
        assert_eq!(
            error(&["status", "65535"]),
            "'65535' is not a VM id (0..65534)"
        );
        assert_eq!(
            error(&["status", "99999"]),
            "'99999' is not a VM id (0..65534)"
        );
        assert_eq!(error(&["status", ""]), "an empty VM name");
    }

    #[test]
    fn the_usage_names_every_verb() {
        for verb in [
            "status", "start", "stop", "restart", "stats", "events", "help",
        ] {
            assert!(USAGE.contains(&format!("  keel {verb}")), "{verb}");
            assert!(
                !matches!(parse(&[verb]), Err(UsageError(ref m)) if m.starts_with("unknown")),
                "{verb}"
            );
        }
    }
}
