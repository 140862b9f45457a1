//! The longest stretches Keel runs with interrupts masked, per pCPU, counted in the
//! instructions each pCPU itself executes, from QEMU's log of the translation blocks run in
//! Keel's code ([`crate::qemu::ExecLog`]).
//!
//! Keel's own record (`KEEL_MASKED_STRETCH`) times a stretch with the system counter. Under
//! `-icount` QEMU runs the pCPUs in turns, one at a time, so while several pCPUs are busy a
//! stretch's counter time also holds the instructions the other pCPUs ran in its middle (a
//! boot of the demo read 1,324,096 on pCPU 3 that way). The log names the pCPU of every
//! block, so each pCPU's own count comes out whatever the interleaving.
//!
//! A stretch, as Keel's record defines it: it begins where Keel is entered (an exception
//! vector, or the first block after a wait for an interrupt) and ends at the block that
//! returns to a guest (`eret`), waits (`wfi`), unmasks (`msr daifclr`), or enters
//! `irq::serve_between_steps`, where a long operation serves what is pending between steps.
//! Two kinds of stretch are kept apart, as no guest's interrupt can wait on them: a pCPU's
//! first, Keel's start of it up to its first guest or wait (on pCPU 0 the whole boot, with the
//! loading of every VM, before any pCPU runs a guest), and the one that turns the machine off.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::process::Command;

use crate::Result;

/// QEMU's `CF_COUNT_MASK`: a block translated to stop after that many instructions (icount's
/// budget ran out in its middle) carries the number in the low bits of its flags.
const COUNT_MASK: u32 = 0x1ff;

/// The core MMU index field of an AArch64 block's flags (bits 4-7), and its value at EL2.
const MMU_INDEX_SHIFT: u32 = 4;
const MMU_INDEX_EL2: u32 = 6;

/// Keel's functions, by address.
pub struct Symbols {
    /// `(address, size, name)`, sorted by address.
    functions: Vec<(u64, u64, String)>,
}

impl Symbols {
    /// The text symbols of the ELF file at `elf` (`llvm-nm`, demangled).
    pub fn read(elf: &Path) -> Result<Self> {
        let output = crate::process::output(
            Command::new(crate::setup::llvm_tool("llvm-nm")?)
                .args(["-n", "-S", "-C"])
                .arg(elf),
        )?;
        Ok(Self::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// `llvm-nm -n -S -C` output: `address [size] type name`.
    fn parse(text: &str) -> Self {
        let mut functions = Vec::new();
        for line in text.lines() {
            let Some((address, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(address) = u64::from_str_radix(address, 16) else {
                continue;
            };
            // A size is as wide as the address; a type is one letter.
            let (size, rest) = match rest.split_once(' ') {
                Some((size, rest)) if size.len() > 1 => (u64::from_str_radix(size, 16).ok(), rest),
                _ => (None, rest),
            };
            let Some((kind, name)) = rest.split_once(' ') else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            // Rust's mangled names end in `::h` and a hash.
            let name = match name.rsplit_once("::h") {
                Some((n, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    n
                }
                _ => name,
            };
            functions.push((address, size.unwrap_or(0), unescape(name)));
        }
        Self { functions }
    }

    /// `start..end` of Keel's code.
    pub fn code(&self) -> Result<(u64, u64)> {
        let start = self.functions.first().ok_or("no function symbols")?.0;
        let end = self
            .functions
            .iter()
            .map(|f| f.0 + f.1.max(4))
            .max()
            .unwrap_or(start);
        Ok((start, end))
    }

    fn address_of(&self, name: &str) -> Option<u64> {
        self.functions.iter().find(|f| f.2 == name).map(|f| f.0)
    }

    /// The function holding `pc`.
    pub fn name(&self, pc: u64) -> &str {
        self.holding(pc).map_or("?", |f| &f.2)
    }

    /// The function holding `pc` and the offset in it (`keel_vectors+0x400`).
    pub fn place(&self, pc: u64) -> String {
        match self.holding(pc) {
            Some((address, _, name)) if *address == pc => name.clone(),
            Some((address, _, name)) => format!("{name}+{:#x}", pc - address),
            None => format!("{pc:#x}"),
        }
    }

    fn holding(&self, pc: u64) -> Option<&(u64, u64, String)> {
        let i = self.functions.partition_point(|f| f.0 <= pc);
        i.checked_sub(1).map(|i| &self.functions[i])
    }
}

/// A name as `llvm-nm -C` leaves Rust's legacy mangling: the path demangled, but the escapes
/// of its parts (`_$LT$keel..A$u20$as$u20$keel..B$GT$`) kept.
fn unescape(name: &str) -> String {
    const ESCAPES: [(&str, &str); 14] = [
        ("$LT$", "<"),
        ("$GT$", ">"),
        ("$u20$", " "),
        ("$RF$", "&"),
        ("$BP$", "*"),
        ("$C$", ","),
        ("$SP$", "@"),
        ("$u27$", "'"),
        ("$u5b$", "["),
        ("$u5d$", "]"),
        ("$u7b$", "{"),
        ("$u7d$", "}"),
        ("$u7e$", "~"),
        ("..", "::"),
    ];
    let mut text = name.replace("::_$", "::$");
    if let Some(rest) = text.strip_prefix("_$") {
        text = format!("${rest}");
    }
    for (escape, plain) in ESCAPES {
        text = text.replace(escape, plain);
    }
    text
}

/// A stretch: its instructions, and its blocks in order (address, instructions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stretch {
    pub instructions: u64,
    pub blocks: Vec<(u64, u32)>,
}

impl Stretch {
    /// The address of its first block (0 if it has none).
    pub fn first(&self) -> u64 {
        self.blocks.first().map_or(0, |b| b.0)
    }

    /// The address of its last block (0 if it has none).
    pub fn last(&self) -> u64 {
        self.blocks.last().map_or(0, |b| b.0)
    }

    /// Its functions in the order it ran them, each run of blocks in one function with its
    /// instructions.
    pub fn path<'a>(&self, symbols: &'a Symbols) -> Vec<(&'a str, u64)> {
        let mut path: Vec<(&str, u64)> = Vec::new();
        for &(pc, n) in &self.blocks {
            let name = symbols.name(pc);
            match path.last_mut() {
                Some((last, total)) if *last == name => *total += u64::from(n),
                _ => path.push((name, u64::from(n))),
            }
        }
        path
    }

    /// Its instructions by function, most first: the top `count`.
    pub fn by_function<'a>(&self, symbols: &'a Symbols, count: usize) -> Vec<(&'a str, u64)> {
        let mut totals: HashMap<&str, u64> = HashMap::new();
        for &(pc, n) in &self.blocks {
            *totals.entry(symbols.name(pc)).or_default() += u64::from(n);
        }
        let mut totals: Vec<_> = totals.into_iter().collect();
        totals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        totals.truncate(count);
        totals
    }
}

/// What the log has shown so far.
pub struct Reader {
    /// Where a stretch always begins (the exception vectors) or ends (`serve_between_steps`).
    entries: Vec<u64>,
    split: Option<u64>,
    /// Where Keel turns the machine off (PSCI SYSTEM_OFF).
    system_off: Option<u64>,
    /// The stretch that ended with the machine's power-off, on its pCPU: nothing waits for it,
    /// so it is not among the longest.
    pub power_off: Option<(usize, Stretch)>,
    range: (u64, u64),
    /// Instructions of each block of Keel's translated so far, and whether it ends a stretch.
    blocks: HashMap<u64, (u32, bool)>,
    /// The block being listed (`IN:`), if any: its address, instructions and whether it ends
    /// a stretch. It is Keel's if the execution logged right after its translation is at EL2:
    /// a guest with its MMU off runs at the same addresses.
    listing: Option<(u64, u32, bool)>,
    /// Blocks executed in Keel's code whose listing was not seen (each counted as one
    /// instruction): 0 in a faithful reading.
    pub unlisted: u64,
    /// Per pCPU: the stretch under way, and the longest ended after its first.
    current: Vec<Option<Stretch>>,
    pub longest: Vec<Stretch>,
    /// Per pCPU, its first stretch (empty until it ends): Keel's start of the pCPU (on pCPU 0, the whole boot with
    /// the loading of every VM) up to its first guest or wait, before any guest runs there.
    pub first: Vec<Stretch>,
}

impl Reader {
    /// A reader for Keel's code as `symbols` describe it.
    pub fn new(symbols: &Symbols) -> Result<Self> {
        let vectors = symbols
            .address_of("keel_vectors")
            .ok_or("no symbol keel_vectors")?;
        Ok(Self {
            entries: [Some(vectors), symbols.address_of("keel_shared_vectors")]
                .into_iter()
                .flatten()
                .flat_map(|table| (0..16).map(move |i| table + 0x80 * i))
                .collect(),
            split: symbols.address_of("keel::irq::serve_between_steps"),
            system_off: symbols.address_of("keel::arch::aarch64::psci::system_off"),
            power_off: None,
            range: symbols.code()?,
            blocks: HashMap::new(),
            listing: None,
            unlisted: 0,
            current: Vec::new(),
            longest: Vec::new(),
            first: Vec::new(),
        })
    }

    /// Reads a whole log from `source` (a file, or the FIFO QEMU writes into), and returns
    /// how many bytes it held.
    pub fn read(&mut self, source: impl std::io::Read, name: &Path) -> Result<u64> {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, source);
        let mut line = Vec::new();
        let mut bytes = 0;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(n) => {
                    bytes += n as u64;
                    self.line(&String::from_utf8_lossy(&line));
                }
                Err(e) => return Err(format!("{}: {e}", name.display())),
            }
        }
        for cpu in 0..self.current.len() {
            self.close(cpu);
        }
        Ok(bytes)
    }

    /// One line of the log: an `IN:` header, an instruction of a listing
    /// (`0xADDR:  WORD  mnemonic operands`), or an executed block
    /// (`Trace CPU: HOST [CS_BASE/PC/FLAGS/CFLAGS] ...`).
    pub fn line(&mut self, line: &str) {
        if self.power_off.is_some() {
            // The machine is off.
        } else if line.starts_with("IN:") {
            self.listing = None;
        } else if let Some(rest) = line.strip_prefix("0x") {
            self.instruction(rest);
        } else if let Some(rest) = line.strip_prefix("Trace ") {
            self.executed(rest);
        }
    }

    fn instruction(&mut self, rest: &str) {
        let Some((address, text)) = rest.split_once(':') else {
            return;
        };
        let Ok(pc) = u64::from_str_radix(address, 16) else {
            return;
        };
        let mut words = text.split_whitespace().skip(1);
        let mnemonic = words.next().unwrap_or("");
        let ends = mnemonic == "eret"
            || mnemonic == "wfi"
            || (mnemonic == "msr" && words.next().is_some_and(|r| r.starts_with("daifclr")));
        let block = self.listing.get_or_insert((pc, 0, false));
        block.1 += 1;
        block.2 |= ends;
    }

    fn executed(&mut self, rest: &str) {
        let Some((cpu, rest)) = rest.split_once(':') else {
            return;
        };
        let Ok(cpu) = cpu.parse::<usize>() else {
            return;
        };
        let Some(fields) = rest.split('[').nth(1).and_then(|r| r.split(']').next()) else {
            return;
        };
        let mut fields = fields.split('/').skip(1);
        let (Some(Ok(pc)), Some(Ok(flags)), Some(Ok(cflags))) = (
            fields.next().map(|f| u64::from_str_radix(f, 16)),
            fields.next().map(|f| u32::from_str_radix(f, 16)),
            fields.next().map(|f| u32::from_str_radix(f, 16)),
        ) else {
            return;
        };
        if self.current.len() <= cpu {
            self.current.resize(cpu + 1, None);
            self.longest.resize(cpu + 1, Stretch::default());
            self.first.resize(cpu + 1, Stretch::default());
        }
        if self.entries.contains(&pc) || Some(pc) == self.split {
            self.close(cpu);
        }
        if Some(pc) == self.system_off {
            self.power_off = Some((cpu, self.current[cpu].take().unwrap_or_default()));
            return;
        }
        let el2 = (flags >> MMU_INDEX_SHIFT) & 0xf == MMU_INDEX_EL2;
        let listing = self.listing.take();
        if !el2 || pc < self.range.0 || pc >= self.range.1 {
            self.close(cpu);
            return;
        }
        if let Some((start, count, ends)) = listing.filter(|l| l.0 == pc) {
            // A block translated anew is counted afresh.
            self.blocks.insert(start, (count, ends));
        }
        let (listed, ends) = self.blocks.get(&pc).copied().unwrap_or_else(|| {
            self.unlisted += 1;
            (1, false)
        });
        let limit = cflags & COUNT_MASK;
        let instructions = if limit == 0 {
            listed
        } else {
            listed.min(limit)
        };
        let stretch = self.current[cpu].get_or_insert_with(Stretch::default);
        stretch.instructions += u64::from(instructions);
        stretch.blocks.push((pc, instructions));
        if ends {
            self.close(cpu);
        }
    }

    fn close(&mut self, cpu: usize) {
        if let Some(stretch) = self.current[cpu].take() {
            if self.first[cpu].blocks.is_empty() {
                self.first[cpu] = stretch;
            } else if stretch.instructions > self.longest[cpu].instructions {
                self.longest[cpu] = stretch;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> Reader {
        let symbols = Symbols::parse(
            "0000000040200000 0000000000000800 T keel_vectors\n\
             0000000040201000 0000000000000100 t keel::irq::serve_between_steps::h0123456789abcdef\n\
             0000000040202000 0000000000001000 t keel::trap::handle\n",
        );
        Reader::new(&symbols).unwrap()
    }

    fn feed(reader: &mut Reader, text: &str) {
        for line in text.lines() {
            reader.line(line);
        }
    }

    const EL2: &str = "00000061";
    const EL1: &str = "00000021";

    fn exec(cpu: usize, pc: u64, flags: &str, cflags: u32) -> String {
        format!("Trace {cpu}: 0x7f0000001000 [00000000/{pc:016x}/{flags}/{cflags:08x}] keel\n")
    }

    /// The listing of Keel's block at `pc` as QEMU prints it when it translates it: a vector
    /// entry of three instructions, a handler block of five, an eret block of two, the
    /// reload's window for interrupts.
    fn listing(pc: u64) -> &'static str {
        match pc {
            0x4020_0400 => {
                "IN: keel_vectors\n\
                 0x40200400:  d10443ff  sub      sp, sp, #0x110\n\
                 0x40200404:  a90007e0  stp      x0, x1, [sp]\n\
                 0x40200408:  94000800  bl       #0x40202000\n"
            }
            0x4020_2000 => {
                "IN: keel::trap::handle\n\
                 0x40202000:  d503201f  nop\n\
                 0x40202004:  d503201f  nop\n\
                 0x40202008:  d503201f  nop\n\
                 0x4020200c:  d503201f  nop\n\
                 0x40202010:  d65f03c0  ret\n"
            }
            0x4020_2100 => {
                "IN: keel::trap::handle\n\
                 0x40202100:  a94007e0  ldp      x0, x1, [sp]\n\
                 0x40202104:  d69f03e0  eret\n"
            }
            _ => "IN: keel::irq::serve_between_steps\n0x40201000:  d503201f  nop\n",
        }
    }

    /// A block translated, then executed.
    fn translated(cpu: usize, pc: u64) -> String {
        listing(pc).to_string() + &exec(cpu, pc, EL2, 0)
    }

    /// Keel's start of pCPUs 0 and 1: three blocks to the first guest, each translated as it
    /// first runs (the others are in QEMU's cache).
    fn started(r: &mut Reader) {
        let log = translated(0, 0x4020_2000)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &translated(0, 0x4020_2100)
            + &exec(1, 0x4020_2000, EL2, 0)
            + &exec(1, 0x4020_2000, EL2, 0)
            + &exec(1, 0x4020_2100, EL2, 0);
        feed(r, &log);
    }

    #[test]
    fn a_stretch_runs_from_the_vector_to_the_eret_on_its_own_pcpu() {
        let mut r = reader();
        started(&mut r);
        // pCPU 0's stretch is interleaved with pCPU 1's, which returns to its guest first.
        let log = translated(0, 0x4020_0400)
            + &exec(1, 0x4020_0400, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(1, 0x4020_2100, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_2100, EL2, 0);
        feed(&mut r, &log);
        assert_eq!(
            r.longest[0],
            Stretch {
                instructions: 3 + 5 + 5 + 2,
                blocks: vec![
                    (0x4020_0400, 3),
                    (0x4020_2000, 5),
                    (0x4020_2000, 5),
                    (0x4020_2100, 2)
                ]
            }
        );
        assert_eq!(r.longest[1].instructions, 3 + 2);
        assert_eq!(r.first[0].instructions, 5 + 5 + 2);
        assert_eq!(r.first[1].instructions, 5 + 5 + 2);
        assert_eq!(r.unlisted, 0);
        let symbols = Symbols::parse(
            "0000000040200000 0000000000000800 T keel_vectors\n\
             0000000040202000 0000000000001000 t keel::trap::handle\n",
        );
        assert_eq!(
            r.longest[0].by_function(&symbols, 1),
            vec![("keel::trap::handle", 12)]
        );
        assert_eq!(
            r.longest[0].path(&symbols),
            vec![("keel_vectors", 3), ("keel::trap::handle", 12)]
        );
    }

    #[test]
    fn guest_code_at_keel_addresses_and_serving_between_steps_end_a_stretch() {
        let mut r = reader();
        started(&mut r);
        // A guest at EL1 runs at Keel's addresses (its MMU off): its one-instruction block at
        // 0x40202000 is not Keel's, and it ends the stretch before it. The reload's window for
        // interrupts ends the next one.
        let guest = "IN: \n0x40202000:  d5033fdf  isb\n".to_string();
        let log = translated(0, 0x4020_0400)
            + &guest
            + &exec(0, 0x4020_2000, EL1, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &translated(0, 0x4020_1000)
            + &exec(0, 0x4020_2100, EL2, 0);
        feed(&mut r, &log);
        assert_eq!(r.longest[0].instructions, 10);
        assert_eq!(r.longest[0].first(), 0x4020_2000);
        assert_eq!(r.longest[0].last(), 0x4020_2000);
        assert_eq!(r.unlisted, 0);
    }

    #[test]
    fn the_stretch_that_turns_the_machine_off_is_kept_apart() {
        let symbols = Symbols::parse(
            "0000000040200000 0000000000000800 T keel_vectors\n\
             0000000040202000 0000000000001000 t keel::trap::handle\n\
             0000000040203000 0000000000000010 t keel::arch::aarch64::psci::system_off\n",
        );
        let mut r = Reader::new(&symbols).unwrap();
        started(&mut r);
        let log = translated(0, 0x4020_0400)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_2100, EL2, 0)
            + &exec(0, 0x4020_0400, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + "IN: \n0x40203000:  d2800100  mov      x0, #0x8\n"
            + &exec(0, 0x4020_3000, EL2, 0)
            + &exec(1, 0x4020_0400, EL2, 0);
        feed(&mut r, &log);
        assert_eq!(r.longest[0].instructions, 3 + 5 + 2);
        assert_eq!(
            r.power_off.as_ref().map(|p| (p.0, p.1.instructions)),
            Some((0, 13))
        );
        // Nothing after it counts: pCPU 1's vector entry is not a stretch.
        assert_eq!(r.longest[1].instructions, 0);
    }

    #[test]
    fn a_block_never_listed_is_counted_as_one_and_reported() {
        let mut r = reader();
        started(&mut r);
        feed(
            &mut r,
            &(exec(0, 0x4020_0400, EL2, 0) + &exec(0, 0x4020_2100, EL2, 0)),
        );
        assert_eq!(r.longest[0].instructions, 1 + 2);
        assert_eq!(r.unlisted, 1);
    }

    #[test]
    fn a_block_cut_short_by_icount_counts_only_what_ran() {
        let mut r = reader();
        started(&mut r);
        let log = translated(0, 0x4020_0400)
            + &exec(0, 0x4020_2000, EL2, 2)
            + &exec(0, 0x4020_2100, EL2, 0);
        feed(&mut r, &log);
        assert_eq!(r.longest[0].instructions, 3 + 2 + 2);
    }

    #[test]
    fn symbols_name_the_function_holding_an_address() {
        let symbols = Symbols::parse(
            "0000000040200000 0000000000000800 T keel_vectors\n\
             0000000040202000 0000000000001000 t keel::trap::handle::h0123456789abcdef\n\
             0000000040203000 t keel::hypercall::dispatch\n",
        );
        assert_eq!(symbols.name(0x4020_2010), "keel::trap::handle");
        assert_eq!(symbols.name(0x4020_3000), "keel::hypercall::dispatch");
        assert_eq!(symbols.name(0x4020_0000), "keel_vectors");
        assert_eq!(symbols.name(0x4000_0000), "?");
        assert_eq!(symbols.place(0x4020_0480), "keel_vectors+0x480");
        assert_eq!(symbols.place(0x4020_2000), "keel::trap::handle");
        assert_eq!(
            unescape("_$LT$keel_core..text..Fill$u20$as$u20$keel_core..text..Show$GT$::show"),
            "<keel_core::text::Fill as keel_core::text::Show>::show"
        );
        assert_eq!(symbols.code().unwrap(), (0x4020_0000, 0x4020_3004));
    }
}
