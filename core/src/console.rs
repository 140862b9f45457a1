//! The console multiplexer: VMs' output lines onto one physical UART with a per-VM prefix,
//! and physical input routed to the VM that has the focus.
//!
//! Output is buffered per VM and written a whole line at a time, so lines of different VMs
//! never interleave mid-line. A partial line (a shell prompt) is written when the hypervisor
//! calls [`ConsoleMux::flush_partial`] (from a short timer); its continuation is then
//! appended without a new prefix unless another VM wrote in between.
//!
//! Input: `Ctrl-A` is the escape key. `Ctrl-A 0`..`9` gives the focus to that VM,
//! `Ctrl-A n` to the next VM, `Ctrl-A x` powers the machine off, `Ctrl-A ?` prints help,
//! and `Ctrl-A Ctrl-A` sends one `Ctrl-A` to the focused VM.

/// Most VMs the multiplexer serves.
pub const MAX_VMS: usize = 16;
/// Longest line buffered before it is written out in pieces.
pub const LINE_CAPACITY: usize = 256;
/// The escape key, Ctrl-A.
pub const ESCAPE: u8 = 0x01;

/// Where multiplexed output goes (the physical UART).
pub trait Sink {
    /// Writes raw bytes.
    fn write(&mut self, bytes: &[u8]);
}

/// What to do with one byte of physical input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Hand the byte to this VM's console.
    Deliver {
        /// Index of the VM.
        vm: usize,
        /// The byte.
        byte: u8,
    },
    /// The focus moved to this VM.
    Focus(usize),
    /// The user asked to power the machine off.
    PowerOff,
    /// The user asked for help.
    Help,
    /// Nothing to do (escape key pressed, or an unknown escape sequence).
    Nothing,
}

#[derive(Clone, Copy)]
struct Line {
    bytes: [u8; LINE_CAPACITY],
    len: usize,
    /// Part of this line is already on the UART, and the UART line is still open.
    continued: bool,
}

/// The multiplexer's state.
pub struct ConsoleMux {
    names: [&'static str; MAX_VMS],
    has_console: [bool; MAX_VMS],
    count: usize,
    focus: usize,
    escape_pending: bool,
    lines: [Line; MAX_VMS],
    /// The VM whose line is open on the UART (written without its newline yet).
    open: Option<usize>,
}

impl ConsoleMux {
    /// A multiplexer for VMs named `names` (indexed by VM id); only those with
    /// `has_console[id]` can hold the focus. The focus starts on the first of them.
    pub fn new(names: &[&'static str], has_console: &[bool]) -> Self {
        let count = names.len().min(MAX_VMS);
        let mut mux = Self {
            names: [""; MAX_VMS],
            has_console: [false; MAX_VMS],
            count,
            focus: 0,
            escape_pending: false,
            lines: [Line {
                bytes: [0; LINE_CAPACITY],
                len: 0,
                continued: false,
            }; MAX_VMS],
            open: None,
        };
        mux.names[..count].copy_from_slice(&names[..count]);
        for (slot, &console) in mux.has_console[..count].iter_mut().zip(has_console) {
            *slot = console;
        }
        mux.focus = (0..count).find(|&vm| mux.has_console[vm]).unwrap_or(0);
        mux
    }

    /// The VM that receives input.
    pub fn focus(&self) -> usize {
        self.focus
    }

    /// Name of a VM.
    pub fn name(&self, vm: usize) -> &'static str {
        self.names.get(vm).copied().unwrap_or("?")
    }

    /// One byte of VM output. Returns true if a partial line is now waiting for
    /// [`flush_partial`](Self::flush_partial).
    pub fn output(&mut self, vm: usize, byte: u8, sink: &mut impl Sink) -> bool {
        if vm >= self.count {
            return false;
        }
        let line = &mut self.lines[vm];
        line.bytes[line.len] = byte;
        line.len += 1;
        if byte == b'\n' {
            self.emit(vm, true, sink);
        } else if self.lines[vm].len == LINE_CAPACITY {
            self.emit(vm, false, sink);
        }
        self.lines[vm].len > 0
    }

    /// Writes out every VM's partial line (called a short while after output stopped).
    pub fn flush_partial(&mut self, sink: &mut impl Sink) {
        for vm in 0..self.count {
            if self.lines[vm].len > 0 {
                self.emit(vm, false, sink);
            }
        }
    }

    /// Writes one line of the hypervisor's own, prefixed `[keel] `, closing any open VM line.
    pub fn hypervisor_line(&mut self, text: &[u8], sink: &mut impl Sink) {
        self.close_open_line(sink);
        sink.write(b"[keel] ");
        sink.write(text);
        sink.write(b"\r\n");
    }

    fn close_open_line(&mut self, sink: &mut impl Sink) {
        if let Some(other) = self.open.take() {
            sink.write(b"\r\n");
            self.lines[other].continued = false;
        }
    }

    fn emit(&mut self, vm: usize, complete: bool, sink: &mut impl Sink) {
        if self.open != Some(vm) || !self.lines[vm].continued {
            self.close_open_line(sink);
            sink.write(b"[");
            sink.write(self.names[vm].as_bytes());
            sink.write(b"] ");
        }
        let line = &mut self.lines[vm];
        sink.write(&line.bytes[..line.len]);
        line.len = 0;
        line.continued = !complete;
        self.open = if complete { None } else { Some(vm) };
    }

    /// One byte of physical input.
    pub fn input(&mut self, byte: u8) -> Input {
        if !self.escape_pending {
            if byte == ESCAPE {
                self.escape_pending = true;
                return Input::Nothing;
            }
            return self.deliver(byte);
        }
        self.escape_pending = false;
        match byte {
            ESCAPE => self.deliver(ESCAPE),
            b'0'..=b'9' => {
                let vm = (byte - b'0') as usize;
                if vm < self.count && self.has_console[vm] {
                    self.focus = vm;
                    Input::Focus(vm)
                } else {
                    Input::Nothing
                }
            }
            b'n' => {
                let next = (1..=self.count)
                    .map(|step| (self.focus + step) % self.count)
                    .find(|&vm| self.has_console[vm]);
                match next {
                    Some(vm) => {
                        self.focus = vm;
                        Input::Focus(vm)
                    }
                    None => Input::Nothing,
                }
            }
            b'x' => Input::PowerOff,
            b'?' | b'h' => Input::Help,
            _ => Input::Nothing,
        }
    }

    fn deliver(&self, byte: u8) -> Input {
        if self.count > 0 && self.has_console[self.focus] {
            Input::Deliver {
                vm: self.focus,
                byte,
            }
        } else {
            Input::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Capture(Vec<u8>);
    impl Sink for Capture {
        fn write(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    fn text(capture: &Capture) -> String {
        String::from_utf8(capture.0.clone()).unwrap()
    }

    fn print(mux: &mut ConsoleMux, vm: usize, s: &str, out: &mut Capture) {
        for b in s.bytes() {
            mux.output(vm, b, out);
        }
    }

    #[test]
    fn lines_are_prefixed_and_never_interleaved() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = Capture(Vec::new());
        print(&mut mux, 0, "hel", &mut out);
        print(&mut mux, 1, "world\n", &mut out);
        print(&mut mux, 0, "lo\n", &mut out);
        assert_eq!(text(&out), "[b] world\n[a] hello\n");
    }

    #[test]
    fn partial_line_flush_and_continuation() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = Capture(Vec::new());
        print(&mut mux, 0, "# ", &mut out);
        mux.flush_partial(&mut out);
        print(&mut mux, 0, "ls\n", &mut out);
        assert_eq!(text(&out), "[a] # ls\n");
        print(&mut mux, 0, "# ", &mut out);
        mux.flush_partial(&mut out);
        print(&mut mux, 1, "tick\n", &mut out);
        print(&mut mux, 0, "x\n", &mut out);
        assert_eq!(text(&out), "[a] # ls\n[a] # \r\n[b] tick\n[a] x\n");
    }

    #[test]
    fn long_lines_are_split_not_lost() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut out = Capture(Vec::new());
        let long = "x".repeat(LINE_CAPACITY + 10) + "\n";
        print(&mut mux, 0, &long, &mut out);
        assert_eq!(text(&out), format!("[a] {long}"));
    }

    #[test]
    fn hypervisor_lines_close_open_lines() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut out = Capture(Vec::new());
        print(&mut mux, 0, "$ ", &mut out);
        mux.flush_partial(&mut out);
        mux.hypervisor_line(b"vm 'a' stopped", &mut out);
        print(&mut mux, 0, "z\n", &mut out);
        assert_eq!(text(&out), "[a] $ \r\n[keel] vm 'a' stopped\r\n[a] z\n");
    }

    #[test]
    fn input_goes_to_focus_and_escape_switches() {
        let mut mux = ConsoleMux::new(&["a", "b", "c"], &[true, false, true]);
        assert_eq!(mux.input(b'q'), Input::Deliver { vm: 0, byte: b'q' });
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(
            mux.input(b'n'),
            Input::Focus(2),
            "skips the VM without console"
        );
        assert_eq!(mux.input(b'q'), Input::Deliver { vm: 2, byte: b'q' });
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'1'), Input::Nothing, "no console: focus stays");
        assert_eq!(mux.focus(), 2);
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'0'), Input::Focus(0));
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(
            mux.input(ESCAPE),
            Input::Deliver {
                vm: 0,
                byte: ESCAPE
            }
        );
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'x'), Input::PowerOff);
    }
}
