#ifndef VMM_LOADER_BOOT_PARAMS_H_
#define VMM_LOADER_BOOT_PARAMS_H_

#include <bit>
#include <cstddef>
#include <cstdint>

// The Linux/x86 boot protocol's data structures, written from the protocol documents rather than
// from kernel headers: Documentation/x86/boot.rst ("The Linux/x86 Boot Protocol", section "THE REAL-MODE
// KERNEL HEADER" gives every offset) and Documentation/x86/zero-page.rst (the layout of the
// 4 KiB `boot_params` "zero page"). Offsets in comments are from the start of the zero page, which is
// also the start of a bzImage file. All fields are little-endian, as the host's.
namespace vmm::loader {

static_assert(std::endian::native == std::endian::little,
              "the boot protocol structures are little-endian and used in place");

// boot.rst: "the setup header ... begins at offset 0x01f1".
inline constexpr uint64_t kSetupHeaderOffset = 0x1f1;
// boot.rst, 0x1fe boot_flag: "Contains 0xAA55".
inline constexpr uint16_t kBootFlagMagic = 0xaa55;
// boot.rst, 0x202 header: "Contains the magic number 'HdrS' (0x53726448)".
inline constexpr uint32_t kHdrSMagic = 0x53726448;
// boot.rst, 0x201: the end of the setup header is "0x0202 + byte value at offset 0x0201".
inline constexpr uint64_t kJumpOffsetByte = 0x201;
inline constexpr uint64_t kHeaderEndBase = 0x202;
// boot.rst, 0x1f1 setup_sects: "If this field is 0, the real value is 4."
inline constexpr uint8_t kDefaultSetupSects = 4;
inline constexpr uint64_t kSectorSize = 512;

// boot.rst, 0x211 loadflags.
inline constexpr uint8_t kLoadedHigh = 0x01;  // Protected-mode code is loaded at 0x100000.
inline constexpr uint8_t kCanUseHeap = 0x80;  // heap_end_ptr is valid.
// boot.rst, 0x236 xloadflags (protocol 2.12).
inline constexpr uint16_t kXlfKernel64 = 0x01;  // "the legacy 64-bit entry point at 0x200".
// boot.rst, 0x210 type_of_loader: "0xFF if no ID is assigned".
inline constexpr uint8_t kTypeOfLoaderUndefined = 0xff;
// boot.rst, 0x1fa vid_mode: 0xFFFF means "normal" (ask for the default text mode).
inline constexpr uint16_t kVidModeNormal = 0xffff;
// boot.rst, 0x22c initrd_addr_max: "For boot protocols 2.02 or earlier, this field is not present,
// and the maximum address is 0x37FFFFFF".
inline constexpr uint32_t kDefaultInitrdAddrMax = 0x37ffffff;
// boot.rst "64-bit BOOT PROTOCOL": the 64-bit entry is "the start address of loaded 64-bit kernel
// plus 0x200".
inline constexpr uint64_t kLinux64EntryOffset = 0x200;
// boot.rst "Details of Header Fields", setup_data: SETUP_DTB carries a flattened device tree.
inline constexpr uint32_t kSetupDtb = 2;
// zero-page.rst: e820_table holds E820_MAX_ENTRIES_ZEROPAGE = 128 entries.
inline constexpr size_t kZeroPageE820MaxEntries = 128;

// Protocol versions at which fields appear (boot.rst, each field's "Protocol:" line).
inline constexpr uint16_t kProtocol2_03 = 0x0203;  // initrd_addr_max
inline constexpr uint16_t kProtocol2_06 = 0x0206;  // cmdline_size; the oldest we accept
inline constexpr uint16_t kProtocol2_09 = 0x0209;  // setup_data
inline constexpr uint16_t kProtocol2_10 = 0x020a;  // pref_address, init_size
inline constexpr uint16_t kProtocol2_12 = 0x020c;  // xloadflags (XLF_KERNEL_64)
inline constexpr uint16_t kProtocol2_15 = 0x020f;  // the version of boot.rst this follows

// The setup header (boot.rst "THE REAL-MODE KERNEL HEADER"), 0x1f1–0x26b as of protocol 2.15.
struct __attribute__((packed)) SetupHeader {
  uint8_t setup_sects;             // 0x1f1
  uint16_t root_flags;             // 0x1f2
  uint32_t syssize;                // 0x1f4 protected-mode code size in 16-byte paragraphs
  uint16_t ram_size;               // 0x1f8
  uint16_t vid_mode;               // 0x1fa
  uint16_t root_dev;               // 0x1fc
  uint16_t boot_flag;              // 0x1fe
  uint16_t jump;                   // 0x200
  uint32_t header;                 // 0x202
  uint16_t version;                // 0x206
  uint32_t realmode_swtch;         // 0x208
  uint16_t start_sys_seg;          // 0x20c
  uint16_t kernel_version;         // 0x20e
  uint8_t type_of_loader;          // 0x210
  uint8_t loadflags;               // 0x211
  uint16_t setup_move_size;        // 0x212
  uint32_t code32_start;           // 0x214
  uint32_t ramdisk_image;          // 0x218
  uint32_t ramdisk_size;           // 0x21c
  uint32_t bootsect_kludge;        // 0x220
  uint16_t heap_end_ptr;           // 0x224
  uint8_t ext_loader_ver;          // 0x226
  uint8_t ext_loader_type;         // 0x227
  uint32_t cmd_line_ptr;           // 0x228
  uint32_t initrd_addr_max;        // 0x22c
  uint32_t kernel_alignment;       // 0x230
  uint8_t relocatable_kernel;      // 0x234
  uint8_t min_alignment;           // 0x235
  uint16_t xloadflags;             // 0x236
  uint32_t cmdline_size;           // 0x238
  uint32_t hardware_subarch;       // 0x23c
  uint64_t hardware_subarch_data;  // 0x240
  uint32_t payload_offset;         // 0x248
  uint32_t payload_length;         // 0x24c
  uint64_t setup_data;             // 0x250
  uint64_t pref_address;           // 0x258
  uint32_t init_size;              // 0x260
  uint32_t handover_offset;        // 0x264
  uint32_t kernel_info_offset;     // 0x268
};

#define VMM_LOADER_HDR_AT(field, offset) \
  static_assert(offsetof(SetupHeader, field) + kSetupHeaderOffset == (offset), #field)
VMM_LOADER_HDR_AT(setup_sects, 0x1f1);
VMM_LOADER_HDR_AT(syssize, 0x1f4);
VMM_LOADER_HDR_AT(vid_mode, 0x1fa);
VMM_LOADER_HDR_AT(boot_flag, 0x1fe);
VMM_LOADER_HDR_AT(jump, 0x200);
VMM_LOADER_HDR_AT(header, 0x202);
VMM_LOADER_HDR_AT(version, 0x206);
VMM_LOADER_HDR_AT(type_of_loader, 0x210);
VMM_LOADER_HDR_AT(loadflags, 0x211);
VMM_LOADER_HDR_AT(code32_start, 0x214);
VMM_LOADER_HDR_AT(ramdisk_image, 0x218);
VMM_LOADER_HDR_AT(ramdisk_size, 0x21c);
VMM_LOADER_HDR_AT(heap_end_ptr, 0x224);
VMM_LOADER_HDR_AT(cmd_line_ptr, 0x228);
VMM_LOADER_HDR_AT(initrd_addr_max, 0x22c);
VMM_LOADER_HDR_AT(kernel_alignment, 0x230);
VMM_LOADER_HDR_AT(relocatable_kernel, 0x234);
VMM_LOADER_HDR_AT(xloadflags, 0x236);
VMM_LOADER_HDR_AT(cmdline_size, 0x238);
VMM_LOADER_HDR_AT(setup_data, 0x250);
VMM_LOADER_HDR_AT(pref_address, 0x258);
VMM_LOADER_HDR_AT(init_size, 0x260);
VMM_LOADER_HDR_AT(kernel_info_offset, 0x268);
#undef VMM_LOADER_HDR_AT
static_assert(sizeof(SetupHeader) == 0x26c - kSetupHeaderOffset);

// zero-page.rst e820_table entry (struct boot_e820_entry): packed, 20 bytes.
struct __attribute__((packed)) BootE820Entry {
  uint64_t addr;
  uint64_t size;
  uint32_t type;
};
static_assert(sizeof(BootE820Entry) == 20);

// zero-page.rst: the whole 4 KiB zero page. Fields a loader has no business with are byte arrays.
// boot.rst "64-bit BOOT PROTOCOL": boot_params is "initialized to all zero. Then, the setup header at
// offset 0x01f1 of kernel image on should be loaded into struct boot_params and examined".
struct __attribute__((packed)) BootParams {
  uint8_t screen_info[0x40];        // 0x000
  uint8_t apm_bios_info[0x14];      // 0x040
  uint8_t pad_054[0x4];             // 0x054
  uint64_t tboot_addr;              // 0x058
  uint8_t ist_info[0x10];           // 0x060
  uint64_t acpi_rsdp_addr;          // 0x070
  uint8_t pad_078[0x8];             // 0x078
  uint8_t hd0_info[0x10];           // 0x080
  uint8_t hd1_info[0x10];           // 0x090
  uint8_t sys_desc_table[0x10];     // 0x0a0
  uint8_t olpc_ofw_header[0x10];    // 0x0b0
  uint32_t ext_ramdisk_image;       // 0x0c0
  uint32_t ext_ramdisk_size;        // 0x0c4
  uint32_t ext_cmd_line_ptr;        // 0x0c8
  uint8_t pad_0cc[0x70];            // 0x0cc
  uint32_t cc_blob_address;         // 0x13c
  uint8_t edid_info[0x80];          // 0x140
  uint8_t efi_info[0x20];           // 0x1c0
  uint32_t alt_mem_k;               // 0x1e0
  uint32_t scratch;                 // 0x1e4
  uint8_t e820_entries;             // 0x1e8
  uint8_t eddbuf_entries;           // 0x1e9
  uint8_t edd_mbr_sig_buf_entries;  // 0x1ea
  uint8_t kbd_status;               // 0x1eb
  uint8_t secure_boot;              // 0x1ec
  uint8_t pad_1ed[0x2];             // 0x1ed
  // The kernel treats a nonzero sentinel as "the loader copied a whole sector over boot_params
  // without clearing what it does not understand" and clears fields (sanitize_boot_params()); we
  // copy only the setup header, so it stays 0.
  uint8_t sentinel;                                   // 0x1ef
  uint8_t pad_1f0[0x1];                               // 0x1f0
  SetupHeader hdr;                                    // 0x1f1
  uint8_t pad_26c[0x290 - 0x26c];                     // 0x26c
  uint32_t edd_mbr_sig_buffer[16];                    // 0x290
  BootE820Entry e820_table[kZeroPageE820MaxEntries];  // 0x2d0
  uint8_t pad_cd0[0x30];                              // 0xcd0
  uint8_t eddbuf[0x1ec];                              // 0xd00
  uint8_t pad_eec[0x114];                             // 0xeec
};
static_assert(sizeof(BootParams) == 4096);
static_assert(offsetof(BootParams, ext_ramdisk_image) == 0x0c0);
static_assert(offsetof(BootParams, ext_ramdisk_size) == 0x0c4);
static_assert(offsetof(BootParams, ext_cmd_line_ptr) == 0x0c8);
static_assert(offsetof(BootParams, cc_blob_address) == 0x13c);
static_assert(offsetof(BootParams, e820_entries) == 0x1e8);
static_assert(offsetof(BootParams, sentinel) == 0x1ef);
static_assert(offsetof(BootParams, hdr) == kSetupHeaderOffset);
static_assert(offsetof(BootParams, edd_mbr_sig_buffer) == 0x290);
static_assert(offsetof(BootParams, e820_table) == 0x2d0);
static_assert(offsetof(BootParams, eddbuf) == 0xd00);

// boot.rst "Details of Header Fields", setup_data: a singly linked list of
// struct setup_data { u64 next; u32 type; u32 len; u8 data[]; }, `len` counting only data[].
struct __attribute__((packed)) SetupDataHeader {
  uint64_t next;
  uint32_t type;
  uint32_t len;
};
static_assert(sizeof(SetupDataHeader) == 16);

}  // namespace vmm::loader

#endif  // VMM_LOADER_BOOT_PARAMS_H_
