//! Where Keel's memory lies in physical memory: at the addresses it is linked for, or, for a
//! coloured Keel (`[system] hypervisor_colours`), its linked range on the 4 KiB frames of its
//! colours ([`KeelMap`]; Keel's map on them is built apart). What a device or the MMU
//! reads by physical address (a translation table, a queue) is found with [`KeelMap::phys`]; a
//! pool of tables in Keel's image is then no longer physically contiguous, so its tables are
//! placed one by one ([`Place`]).
//!
//! An uncoloured Keel has [`KeelMap::IDENTITY`]: every address is its own physical address.

use crate::colour::{keel_frames, Colours, FRAME};
use crate::text::{Hex, Out, Show};

/// Where Keel's coloured range lies: its linked range `[start, start + size)`, but for the
/// pages of `hole` (the guests' images, which stay where Keel was loaded), is the frames of
/// `colours` from `frames` on, in order (its `i`-th page outside the hole at
/// [`Colours::frame`]`(frames, i)`); every other address is its own physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeelMap {
    /// Start of the coloured range, as Keel is linked (4 KiB aligned).
    pub start: u64,
    /// Bytes of the range, hole included (whole pages).
    pub size: u64,
    /// The pages of the range left where they are, `(start, end)` (4 KiB aligned; empty when
    /// equal).
    pub hole: (u64, u64),
    /// The physical base its frames are counted from (aligned to a period of the colours).
    pub frames: u64,
    /// Keel's colours.
    pub colours: Colours,
}

impl KeelMap {
    /// An uncoloured Keel: each address is its physical address.
    pub const IDENTITY: KeelMap = KeelMap {
        start: 0,
        size: 0,
        hole: (0, 0),
        frames: 0,
        colours: Colours::NONE,
    };

    /// Bytes of the hole.
    fn hole_size(&self) -> u64 {
        self.hole.1.saturating_sub(self.hole.0)
    }

    /// Bytes of the range that its frames hold (all but the hole).
    pub fn coloured_size(&self) -> u64 {
        self.size - self.hole_size()
    }

    /// The physical address of Keel's address `address`.
    #[inline]
    pub fn phys(&self, address: u64) -> u64 {
        let offset = address.wrapping_sub(self.start);
        if offset >= self.size || (self.hole.0 <= address && address < self.hole.1) {
            return address;
        }
        let skipped = if address >= self.hole.1 {
            self.hole_size()
        } else {
            0
        };
        match self.colours.frame(self.frames, (offset - skipped) / FRAME) {
            Some(frame) => frame + offset % FRAME,
            None => address,
        }
    }

    /// Keel's address of physical address `phys` ([`Self::phys`] undone): a frame of the
    /// coloured range back at its linked address, any other address as it is.
    pub fn address(&self, phys: u64) -> u64 {
        let count = u64::from(self.colours.count);
        if !self.colours.is_coloured() || phys < self.frames || count == 0 {
            return phys;
        }
        let frame = (phys - self.frames) / FRAME;
        let colour = frame % count;
        if self.colours.mask >> colour & 1 == 0 {
            return phys;
        }
        let below = (self.colours.mask & ((1u64 << colour) - 1)).count_ones();
        let page = frame / count * u64::from(self.colours.len()) + u64::from(below);
        if page >= self.coloured_size() / FRAME {
            return phys;
        }
        let address = self.start + page * FRAME;
        let address = if address >= self.hole.0 && self.hole_size() > 0 {
            address + self.hole_size()
        } else {
            address
        };
        address + phys % FRAME
    }

    /// The physical range the coloured range's frames span from [`Self::frames`].
    pub fn span(&self) -> Option<u64> {
        self.colours.span(self.coloured_size())
    }

    /// The map of `image` coloured `colours` in Keel's region `(base, size)`: its range on the
    /// frames of its colours in the region's upper half ([`keel_frames`]), the guests' images'
    /// whole pages a hole; or why it does not fit there.
    pub fn coloured(
        image: &KeelImage,
        (region, region_size): (u64, u64),
        colours: Colours,
    ) -> Result<KeelMap, KeelFitError> {
        let (images, images_end) = image.guest_images;
        // The guests' images' whole pages stay; the pages at their ends are copied.
        let hole = (images.next_multiple_of(FRAME), images_end & !(FRAME - 1));
        let map = KeelMap {
            start: image.start,
            size: image.coloured_end - image.start,
            hole: if hole.0 < hole.1 { hole } else { (0, 0) },
            frames: keel_frames(region, region_size, colours).0,
            colours,
        };
        // Its whole image, what stays where it was loaded included, lies below its frames.
        if image.end > map.frames {
            return Err(KeelFitError::Overlaps {
                end: image.end,
                frames: map.frames,
            });
        }
        let needs = map.frames.saturating_add(map.span().unwrap_or(u64::MAX));
        if needs > region + region_size {
            return Err(KeelFitError::TooSmall {
                size: map.coloured_size(),
                needs,
                region_end: region + region_size,
            });
        }
        Ok(map)
    }
}

/// Keel's image as it is linked (its linker's symbols): what a coloured Keel's map is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeelImage {
    /// `__image_start`: where it starts, and its coloured range.
    pub start: u64,
    /// `__coloured_end`: where its coloured range ends.
    pub coloured_end: u64,
    /// `__guest_images_start` and `__guest_images_end`: the guests' images in that range.
    pub guest_images: (u64, u64),
    /// `__image_end`: where it ends, what stays physically contiguous included.
    pub end: u64,
}

/// Why a coloured Keel does not fit its region ([`KeelMap::coloured`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeelFitError {
    /// Its image reaches the frames it is to be copied to.
    Overlaps {
        /// The end of its image.
        end: u64,
        /// Where its frames start.
        frames: u64,
    },
    /// The frames of its colours to the region's end are too few for its coloured range.
    TooSmall {
        /// Bytes of its coloured range, the hole apart.
        size: u64,
        /// The end of the frames it would take.
        needs: u64,
        /// The end of Keel's region.
        region_end: u64,
    },
}

impl Show for KeelFitError {
    fn show(&self, out: &mut dyn Out) {
        match *self {
            KeelFitError::Overlaps { end, frames } => crate::text!(
                out,
                "its image with its guests ends at ",
                Hex(end, 0),
                ", past the middle of its region, where the frames of its colours start at ",
                Hex(frames, 0),
                ": give [system] hypervisor a larger size"
            ),
            KeelFitError::TooSmall {
                size,
                needs,
                region_end,
            } => crate::text!(
                out,
                "its code, data and stacks (",
                size,
                " bytes) in frames of its colours reach ",
                Hex(needs, 0),
                ", past its region's end at ",
                Hex(region_end, 0),
                ": give [system] hypervisor a larger size, or Keel more colours"
            ),
        }
    }
}

/// Where a pool of translation tables lies: its first table at Keel's address `address`, the
/// rest after it, each table at the physical address `map` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The pool's address in Keel's address space.
    pub address: u64,
    /// How Keel's addresses map to physical ones.
    pub map: KeelMap,
}

impl Place {
    /// A pool at Keel's address `address`, with Keel's memory as `map` places it.
    pub fn new(address: u64, map: KeelMap) -> Self {
        Self { address, map }
    }

    /// The physical address of the pool's table `index`.
    pub(crate) fn table_phys(&self, index: usize) -> u64 {
        self.map.phys(self.address + index as u64 * FRAME)
    }

    /// The index of the pool's table at physical address `phys`, if it is one of the first
    /// `used`.
    pub(crate) fn table_index(&self, phys: u64, used: usize) -> Option<usize> {
        let offset = self.map.address(phys).checked_sub(self.address)?;
        let index = usize::try_from(offset / FRAME).ok()?;
        (offset.is_multiple_of(FRAME) && index < used).then_some(index)
    }
}

/// A pool that is physically contiguous at `pool_phys` (Keel's address the same).
impl From<u64> for Place {
    fn from(pool_phys: u64) -> Self {
        Self::new(pool_phys, KeelMap::IDENTITY)
    }
}

/// The tests' Keel: 1 MiB linked at 0x4020_0000 in a 32 MiB region at 0x4000_0000 (16
/// colours), coloured `colours`; its pages 0x20-0x2f are a hole.
#[cfg(test)]
pub(crate) fn test_keel(colours: &str) -> KeelMap {
    let colours = Colours::parse(colours, 16).unwrap();
    KeelMap {
        start: 0x4020_0000,
        size: 0x10_0000,
        hole: (0x4022_0000, 0x4023_0000),
        frames: crate::colour::keel_frames(0x4000_0000, 32 << 20, colours).0,
        colours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keel(colours: &str) -> KeelMap {
        test_keel(colours)
    }

    #[test]
    fn keel_s_pages_are_frames_of_its_colours_in_its_region_s_upper_half() {
        let map = keel("15");
        assert_eq!(map.frames, 0x4100_0000);
        let mut frames = std::collections::BTreeSet::new();
        for page in 0..map.size / FRAME {
            let address = map.start + page * FRAME + 0x123;
            let phys = map.phys(address);
            if (0x20..0x30).contains(&page) {
                assert_eq!(phys, address, "page {page} is in the hole");
                continue;
            }
            assert_eq!((phys >> 12) % 16, 15, "page {page}");
            assert!((0x4100_0000..0x4200_0000).contains(&phys));
            assert_eq!(map.address(phys), address);
            assert!(frames.insert(phys >> 12), "page {page} shares a frame");
        }
        // The hole's pages take no frame: the frames are the first 240 of colour 15.
        assert_eq!(frames.len(), 240);
        assert_eq!(map.span(), Some(239 * 16 * FRAME + 16 * FRAME));
        assert_eq!(map.phys(map.start - 1), map.start - 1);
        assert_eq!(map.phys(map.start + map.size), map.start + map.size);
        // Frames of other colours, and the frames past the range, are not Keel's pages.
        assert_eq!(map.address(0x4100_0000), 0x4100_0000);
        let past = map.colours.frame(map.frames, 240).unwrap();
        assert_eq!(map.address(past), past);
    }

    #[test]
    fn the_identity_map_changes_nothing() {
        for address in [0, 0x4000_0000, u64::MAX] {
            assert_eq!(KeelMap::IDENTITY.phys(address), address);
            assert_eq!(KeelMap::IDENTITY.address(address), address);
        }
    }

    #[test]
    fn a_pool_in_coloured_memory_finds_its_tables_one_by_one() {
        let map = keel("3,9");
        let place = Place::new(map.start + 0x4000, map);
        for index in 0..8 {
            let phys = place.table_phys(index);
            assert!(phys.is_multiple_of(FRAME) && [3, 9].contains(&((phys >> 12) % 16)));
            assert_eq!(place.table_index(phys, 8), Some(index));
        }
        assert_eq!(place.table_index(place.table_phys(8), 8), None);
        assert_eq!(Place::from(0x1000).table_phys(2), 0x3000);
    }

    #[test]
    fn a_coloured_keel_fits_its_region_s_upper_half_or_says_why_not() {
        let colours = Colours::parse("14-15", 16).unwrap();
        let image = KeelImage {
            start: 0x4020_0000,
            coloured_end: 0x4040_0000,
            guest_images: (0x4030_0800, 0x4033_0400),
            end: 0x4041_0000,
        };
        let region = (0x4000_0000, 64 << 20);
        let map = KeelMap::coloured(&image, region, colours).unwrap();
        assert_eq!(map.frames, 0x4200_0000);
        assert_eq!(map.hole, (0x4030_1000, 0x4033_0000));
        assert_eq!(map.coloured_size(), (2 << 20) - 0x2f000);
        // The guests' images' partial pages at either end are coloured, their whole pages not.
        assert_ne!(map.phys(0x4030_0800), 0x4030_0800);
        assert_eq!(map.phys(0x4031_0000), 0x4031_0000);
        // Images that do not cover a whole page leave no hole.
        let small = KeelImage {
            guest_images: (0x4030_0800, 0x4030_1400),
            ..image
        };
        assert_eq!(
            KeelMap::coloured(&small, region, colours).unwrap().hole,
            (0, 0)
        );
        // An image past the region's middle, or a range its colours' frames cannot hold.
        let long = KeelImage {
            end: 0x4200_1000,
            ..image
        };
        assert_eq!(
            KeelMap::coloured(&long, region, colours),
            Err(KeelFitError::Overlaps {
                end: 0x4200_1000,
                frames: 0x4200_0000
            })
        );
        let big = KeelImage {
            coloured_end: 0x4060_0000,
            end: 0x4060_0000,
            ..image
        };
        let one = Colours::parse("15", 16).unwrap();
        assert_eq!(
            KeelMap::coloured(&big, region, one),
            Err(KeelFitError::TooSmall {
                size: (4 << 20) - 0x2f000,
                needs: 0x4200_0000 + one.span((4 << 20) - 0x2f000).unwrap(),
                region_end: 0x4400_0000
            })
        );
        let overlaps = KeelFitError::Overlaps {
            end: 0x4200_1000,
            frames: 0x4200_0000,
        };
        assert_eq!(
            crate::text::tests::shown(&overlaps),
            "its image with its guests ends at 0x42001000, past the middle of its region, where \
             the frames of its colours start at 0x42000000: give [system] hypervisor a larger size"
        );
    }
}
