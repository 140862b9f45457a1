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
//! A pCPU's first stretch, Keel's start of it up to its first guest or wait (on pCPU 0 the
//! whole boot, with the loading of every VM, before any pCPU runs a guest), is kept apart:
//! no guest is there yet whose interrupt could wait.

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
            functions.push((address, size.unwrap_or(0), name.to_string()));
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

/// One pCPU's longest stretch: its instructions, and the addresses of its first and last
/// blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stretch {
    pub instructions: u64,
    pub first: u64,
    pub last: u64,
}

/// What the log has shown so far.
pub struct Reader {
    /// Where a stretch always begins (the exception vectors) or ends (`serve_between_steps`).
    entries: Vec<u64>,
    split: Option<u64>,
    range: (u64, u64),
    /// Instructions of each block translated so far, and whether it ends a stretch.
    blocks: HashMap<u64, (u32, bool)>,
    /// The block being listed (`IN:`), if any.
    listing: Option<u64>,
    /// Per pCPU: the stretch under way, the longest ended, and whether a stretch has ended
    /// yet.
    current: Vec<Option<Stretch>>,
    pub longest: Vec<Stretch>,
    started: Vec<bool>,
    /// Per pCPU, its first stretch: Keel's start of the pCPU (on pCPU 0, the whole boot with
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
            entries: (0..16).map(|i| vectors + 0x80 * i).collect(),
            split: symbols.address_of("keel::irq::serve_between_steps"),
            range: symbols.code()?,
            blocks: HashMap::new(),
            listing: None,
            current: Vec::new(),
            longest: Vec::new(),
            started: Vec::new(),
            first: Vec::new(),
        })
    }

    /// Reads a whole log.
    pub fn read(&mut self, log: &Path) -> Result<()> {
        let file = std::fs::File::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => self.line(&String::from_utf8_lossy(&line)),
                Err(e) => return Err(format!("{}: {e}", log.display())),
            }
        }
        for cpu in 0..self.current.len() {
            self.close(cpu);
        }
        Ok(())
    }

    /// One line of the log: an `IN:` header, an instruction of a listing
    /// (`0xADDR:  WORD  mnemonic operands`), or an executed block
    /// (`Trace CPU: HOST [CS_BASE/PC/FLAGS/CFLAGS] ...`).
    pub fn line(&mut self, line: &str) {
        if line.starts_with("IN:") {
            self.listing = None;
        } else if let Some(rest) = line.strip_prefix("0x") {
            self.instruction(rest);
        } else if let Some(rest) = line.strip_prefix("Trace ") {
            self.listing = None;
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
        let start = *self.listing.get_or_insert(pc);
        let block = self.blocks.entry(start).or_insert((0, false));
        if start == pc {
            // A block listed again (translated anew) is counted afresh.
            *block = (0, false);
        }
        block.0 += 1;
        block.1 |= ends;
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
            self.started.resize(cpu + 1, false);
            self.first.resize(cpu + 1, Stretch::default());
        }
        if self.entries.contains(&pc) || Some(pc) == self.split {
            self.close(cpu);
        }
        let el2 = (flags >> MMU_INDEX_SHIFT) & 0xf == MMU_INDEX_EL2;
        if !el2 || pc < self.range.0 || pc >= self.range.1 {
            self.close(cpu);
            return;
        }
        let (listed, ends) = self.blocks.get(&pc).copied().unwrap_or((1, false));
        let limit = cflags & COUNT_MASK;
        let instructions = if limit == 0 {
            listed
        } else {
            listed.min(limit)
        };
        let stretch = self.current[cpu].get_or_insert(Stretch {
            instructions: 0,
            first: pc,
            last: pc,
        });
        stretch.instructions += u64::from(instructions);
        stretch.last = pc;
        if ends {
            self.close(cpu);
        }
    }

    fn close(&mut self, cpu: usize) {
        if let Some(stretch) = self.current[cpu].take() {
            if !self.started[cpu] {
                self.started[cpu] = true;
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

    /// A vector entry of three instructions, a handler block of five, an eret block of two.
    fn listings() -> String {
        "IN: keel_vectors\n\
         0x40200400:  d10443ff  sub      sp, sp, #0x110\n\
         0x40200404:  a90007e0  stp      x0, x1, [sp]\n\
         0x40200408:  94000800  bl       #0x40202000\n\
         IN: keel::trap::handle\n\
         0x40202000:  d503201f  nop\n\
         0x40202004:  d503201f  nop\n\
         0x40202008:  d503201f  nop\n\
         0x4020200c:  d503201f  nop\n\
         0x40202010:  d65f03c0  ret\n\
         IN: keel::trap::handle\n\
         0x40202100:  a94007e0  ldp      x0, x1, [sp]\n\
         0x40202104:  d69f03e0  eret\n"
            .to_string()
    }

    /// Keel's start of pCPUs 0 and 1: three blocks to the first guest.
    fn started(r: &mut Reader) {
        feed(r, &listings());
        for cpu in 0..2 {
            let log = exec(cpu, 0x4020_2000, EL2, 0)
                + &exec(cpu, 0x4020_2000, EL2, 0)
                + &exec(cpu, 0x4020_2100, EL2, 0);
            feed(r, &log);
        }
    }

    #[test]
    fn a_stretch_runs_from_the_vector_to_the_eret_on_its_own_pcpu() {
        let mut r = reader();
        started(&mut r);
        // pCPU 0's stretch is interleaved with pCPU 1's, which returns to its guest first.
        let log = exec(0, 0x4020_0400, EL2, 0)
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
                first: 0x4020_0400,
                last: 0x4020_2100
            }
        );
        assert_eq!(r.longest[1].instructions, 3 + 2);
        assert_eq!(r.first[0].instructions, 5 + 5 + 2);
    }

    #[test]
    fn guest_code_at_keel_addresses_and_serving_between_steps_end_a_stretch() {
        let mut r = reader();
        started(&mut r);
        feed(
            &mut r,
            "IN: keel::irq::serve_between_steps\n0x40201000:  d503201f  nop\n",
        );
        // A guest at EL1 runs at Keel's addresses (its MMU off): not Keel, and it ends the
        // stretch before it. The reload's window for interrupts ends the next one.
        let log = exec(0, 0x4020_0400, EL2, 0)
            + &exec(0, 0x4020_2000, EL1, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_2000, EL2, 0)
            + &exec(0, 0x4020_1000, EL2, 0)
            + &exec(0, 0x4020_2100, EL2, 0);
        feed(&mut r, &log);
        assert_eq!(r.longest[0].instructions, 10);
        assert_eq!(r.longest[0].first, 0x4020_2000);
    }

    #[test]
    fn a_block_cut_short_by_icount_counts_only_what_ran() {
        let mut r = reader();
        started(&mut r);
        let log = exec(0, 0x4020_0400, EL2, 0)
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
        assert_eq!(symbols.code().unwrap(), (0x4020_0000, 0x4020_3004));
    }
}
