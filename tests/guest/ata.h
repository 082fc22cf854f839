/*
 * ATA/ATAPI host driver for a PCI IDE controller (Intel PIIX3 8086:7010, or any class 01 01
 * function) in ring 3: task-file registers at the legacy ports (or the native BARs), the
 * bus-master DMA block of BAR4 (SFF-8038i), ATA-8 ACS commands for disks and the ATA8-APT PACKET
 * protocol for CD-ROMs (MMC commands). Used by ide_tests.c; see docs/test-guest.md, "IDE".
 *
 * Everything is polled (no interrupt handler): nIEN stays 0, so INTRQ still latches the bus
 * master's Interrupt bit, which is how a DMA completion is seen. Every register access is port
 * I/O (about 100 us each under PVM), so the driver keeps them few: it tracks which device is
 * selected and whether it is idle, caches the PRD table address and clears the bus-master status
 * only when something may have set it. PIO data moves with REP INSW/OUTSW (one trap per DRQ
 * block; the runtime's #GP entry emulates string I/O under PVM).
 */
#ifndef TESTS_GUEST_ATA_H_
#define TESTS_GUEST_ATA_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/guest/pci.h"

/* Command block register offsets (ATA-8 ACS / ATA8-APT). */
#define ATA_REG_DATA 0
#define ATA_REG_ERROR 1    /* read */
#define ATA_REG_FEATURES 1 /* write */
#define ATA_REG_COUNT 2    /* ATAPI: interrupt reason on read */
#define ATA_REG_LBAL 3
#define ATA_REG_LBAM 4 /* ATAPI: byte count low */
#define ATA_REG_LBAH 5 /* ATAPI: byte count high */
#define ATA_REG_DEVICE 6
#define ATA_REG_STATUS 7  /* read (clears a pending INTRQ) */
#define ATA_REG_COMMAND 7 /* write */

/* Status. */
#define ATA_BSY 0x80
#define ATA_DRDY 0x40
#define ATA_DF 0x20
#define ATA_DSC 0x10
#define ATA_DRQ 0x08
#define ATA_CORR 0x04
#define ATA_IDX 0x02
#define ATA_ERR 0x01 /* ATAPI: CHK */

/* Error. */
#define ATA_ER_ICRC 0x80
#define ATA_ER_UNC 0x40
#define ATA_ER_MC 0x20
#define ATA_ER_IDNF 0x10
#define ATA_ER_MCR 0x08
#define ATA_ER_ABRT 0x04
#define ATA_ER_NM 0x02
#define ATA_ER_AMNF 0x01

/* Device Control. */
#define ATA_CTL_OBS 0x08 /* written as 1, as Linux does */
#define ATA_CTL_SRST 0x04
#define ATA_CTL_NIEN 0x02

/* ATAPI interrupt reason (Sector Count register). */
#define ATAPI_IR_COD 0x01
#define ATAPI_IR_IO 0x02

/* Bus master (SFF-8038i): command +0, status +2, PRD table address +4, per channel 8 bytes. */
#define BM_CMD 0
#define BM_STATUS 2
#define BM_PRD 4
#define BM_CMD_START 0x01
#define BM_CMD_WRITE_MEM 0x08 /* 1: the bus master writes memory (device-to-host, reads) */
#define BM_ST_ACTIVE 0x01
#define BM_ST_ERROR 0x02
#define BM_ST_INTR 0x04
#define BM_ST_DRV0_DMA 0x20
#define BM_ST_DRV1_DMA 0x40
#define BM_ST_SIMPLEX 0x80
#define PRD_EOT 0x80000000u

/* ATA commands. */
#define ATA_CMD_NOP 0x00
#define ATA_CMD_DEVICE_RESET 0x08
#define ATA_CMD_READ_SECTORS 0x20
#define ATA_CMD_READ_SECTORS_EXT 0x24
#define ATA_CMD_READ_DMA_EXT 0x25
#define ATA_CMD_WRITE_SECTORS 0x30
#define ATA_CMD_WRITE_SECTORS_EXT 0x34
#define ATA_CMD_WRITE_DMA_EXT 0x35
#define ATA_CMD_WRITE_DMA_FUA_EXT 0x3d
#define ATA_CMD_PACKET 0xa0
#define ATA_CMD_IDENTIFY_PACKET 0xa1
#define ATA_CMD_READ_DMA 0xc8
#define ATA_CMD_WRITE_DMA 0xca
#define ATA_CMD_FLUSH_CACHE 0xe7
#define ATA_CMD_FLUSH_CACHE_EXT 0xea
#define ATA_CMD_IDENTIFY 0xec
#define ATA_CMD_SET_FEATURES 0xef
#define ATA_SF_XFER_MODE 0x03

/* MMC / SPC opcodes used over ATAPI. */
#define ATAPI_TEST_UNIT_READY 0x00
#define ATAPI_REQUEST_SENSE 0x03
#define ATAPI_INQUIRY 0x12
#define ATAPI_START_STOP 0x1b
#define ATAPI_PREVENT_ALLOW 0x1e
#define ATAPI_READ_CAPACITY 0x25
#define ATAPI_READ_10 0x28
#define ATAPI_READ_TOC 0x43
#define ATAPI_GET_CONFIGURATION 0x46
#define ATAPI_GESN 0x4a
#define ATAPI_MODE_SENSE_10 0x5a
#define ATAPI_READ_12 0xa8

enum ata_class { ATA_CLASS_NONE, ATA_CLASS_ATA, ATA_CLASS_ATAPI, ATA_CLASS_UNKNOWN };

struct ata_chan;

struct ata_dev {
  struct ata_chan *ch;
  unsigned unit; /* 0 master, 1 slave */
  enum ata_class cls;
  const char *why; /* classification reason */
  /* Registers after the reset. */
  uint8_t sig_status, sig_error, sig_count, sig_lbal, sig_lbam, sig_lbah;
  bool devchk; /* the 0x55/0xAA presence check latched */

  bool identified;
  uint16_t id[256];
  char model[41], serial[21], firmware[9];
  bool lba, lba48, dma, fua, wcache_supported, wcache, flush, flush_ext;
  uint64_t sectors;      /* ATA: user-addressable 512-byte sectors */
  uint32_t logical_size; /* ATA: bytes per logical sector */
  uint8_t udma_modes, udma_selected, mwdma_modes, mwdma_selected;
  unsigned major; /* word 80: highest ATA/ATAPI-n bit */
  /* ATAPI. */
  unsigned packet_len; /* 12 or 16 */
  unsigned atapi_type; /* word 0 bits 12:8 (5 = CD/DVD) */
  bool dmadir;         /* word 62 bit 15: DMADIR required */
  uint32_t cd_blocks, cd_block_size;
};

struct ata_ctrl;

struct ata_chan {
  struct ata_ctrl *ctrl;
  unsigned index;
  uint16_t cmd, ctl,
      bm;          /* command block, control block (alt status / device control), bus master */
  uint8_t bm_keep; /* drive DMA-capable / simplex bits of the BM status (written back as read) */
  uint8_t devctl;  /* last Device Control value */
  int selected;    /* unit selected in the Device register, -1 unknown */
  int devreg;      /* last value written to the Device register, -1 unknown */
  bool idle;       /* the selected device was last seen with BSY = 0 and DRQ = 0 */
  bool bm_dirty;   /* BM status may hold a stale Interrupt (an IRQ since the last clear) */
  uint32_t prd_loaded; /* PRD address in the BM register (0 unknown) */
  uint32_t *prd;       /* this channel's PRD table: one 4 KiB page, 512 entries */
  struct ata_dev dev[2];
};

struct ata_ctrl {
  struct pci_device pci;
  uint32_t bar4;
  uint16_t bm_base;
  uint8_t prog_if;
  struct ata_chan ch[2];
  bool verbose;
};

/* How data moves. */
enum ata_proto { ATA_NODATA, ATA_PIO_IN, ATA_PIO_OUT, ATA_DMA_IN, ATA_DMA_OUT };

/* One command: an ATA task file, or (packet != NULL) a PACKET command with its CDB. */
struct ata_cmd {
  uint8_t command, features;
  uint16_t count; /* sector count (LBA48: 16 bits) */
  uint64_t lba;
  bool ext;      /* 48-bit task file (HOB registers written first) */
  bool lba_mode; /* LBA bit (0x40) in the Device register */
  enum ata_proto proto;
  void *buf;
  uint32_t len;   /* bytes of data expected */
  unsigned block; /* PIO DRQ block size in bytes (ATA; default 512) */
  const uint8_t *packet;
  uint16_t bcl;        /* ATAPI byte count limit (default 0xfffe) */
  uint64_t timeout_us; /* default 10 s */
  /* Fault injection (ide-errors). */
  uint32_t prd_addr;          /* use this PRD table instead of one built from buf/len */
  bool wrong_direction;       /* program the bus master for the opposite direction */
  bool no_bm_start;           /* never set the bus master's Start bit (the device waits) */
  unsigned stop_after_blocks; /* PIO: abandon the command after this many DRQ blocks */
  bool read_back;             /* read Sector Count / LBA Low/Mid/High after completion */
  bool no_auto_sense;         /* ATAPI: no REQUEST SENSE after CHECK CONDITION */
  bool no_recover;            /* leave the channel as it is after a failure (no SRST) */
};

struct ata_result {
  bool timeout;          /* the device did not finish in time */
  const char *stuck;     /* what went wrong in the protocol (timeouts included) */
  bool recovered;        /* the channel was reset afterwards (ata_recover) */
  bool dma;              /* a DMA command */
  bool packet_sent;      /* ATAPI: the device asked for the CDB and got it */
  uint8_t tf[4];         /* read_back: Sector Count, LBA Low, LBA Mid, LBA High */
  uint8_t status, error; /* final status (error register read only when ERR) */
  uint8_t bm_status;     /* DMA: bus-master status at completion, before clearing */
  bool dma_short;        /* DMA: Active cleared without Interrupt while the device still waited */
  uint8_t ireason;       /* ATAPI: interrupt reason at the first DRQ (packet phase) */
  uint32_t bytes;        /* data moved (PIO: counted; DMA: len on success) */
  unsigned drq_blocks;   /* PIO data blocks */
  uint32_t min_block, max_block; /* ATAPI PIO: byte counts the device gave */
  bool overflow; /* ATAPI PIO: the device offered more than len (excess read and dropped) */
  uint64_t elapsed_us;
  /* ATAPI CHECK CONDITION: sense from the error register and REQUEST SENSE. */
  bool check;
  bool sense_valid;
  uint8_t sense_key, asc, ascq;
  uint8_t sense_status; /* status of the REQUEST SENSE itself */
};

#define ATA_DEFAULT_TIMEOUT_US 10000000ull

/* Finds the IDE function (class 01 01; Intel 8086:7010 preferred; `index`-th such function),
 * enables I/O decoding and bus mastering, reads BAR4, sets up both channels (legacy ports unless
 * the programming interface says native). Returns NULL on success, else why not. */
const char *ata_init(struct ata_ctrl *c, unsigned index, bool verbose);
/* Devchk (0x55/0xAA latch test) for both units, SRST, then classification by signature.
 * Returns the number of devices found on the channel. */
unsigned ata_probe_channel(struct ata_chan *ch);
/* SRST (Device Control SRST 1 -> 0, 2 ms), then for each unit in `mask` (bit 0 = master): BSY = 0
 * and the reset signature (Sector Count = LBA Low = 01h) once selected. Returns the units that
 * stayed BSY past timeout_us. Leaves the selection unknown. */
unsigned ata_soft_reset(struct ata_chan *ch, unsigned mask, uint64_t timeout_us);
/* IDENTIFY (PACKET) DEVICE into d->id and the parsed fields. */
bool ata_identify(struct ata_dev *d, struct ata_result *r);
/* SET FEATURES: set transfer mode (e.g. 0x22 MWDMA2, 0x42 UDMA2). */
bool ata_set_xfer_mode(struct ata_dev *d, uint8_t mode, struct ata_result *r);

/* Runs one command on d (waits for completion; after a timeout the channel gets an SRST unless
 * cmd->no_recover). Returns true when it ended without ERR/DF/timeout (ATAPI: GOOD). */
bool ata_exec(struct ata_dev *d, const struct ata_cmd *cmd, struct ata_result *r);

/* Block commands (ATA disk), 512-byte sectors; pick the 28-bit form when lba + count fits and
 * !force48. */
bool ata_rw_dma(struct ata_dev *d, bool write, bool fua, bool force48, uint64_t lba, uint32_t count,
                void *buf, struct ata_result *r);
bool ata_rw_pio(struct ata_dev *d, bool write, bool force48, uint64_t lba, uint32_t count,
                void *buf, struct ata_result *r);
bool ata_flush(struct ata_dev *d, bool ext, struct ata_result *r);

/* ATAPI: one PACKET command. proto ATA_NODATA / ATA_PIO_IN / ATA_DMA_IN. */
bool atapi_cmd(struct ata_dev *d, const uint8_t *cdb, enum ata_proto proto, void *buf, uint32_t len,
               uint16_t bcl, struct ata_result *r);
/* REQUEST SENSE (PIO, alloc 18) into r->sense_*. */
bool atapi_request_sense(struct ata_dev *d, struct ata_result *r);
/* READ(10) of count 2048-byte blocks. */
bool atapi_read(struct ata_dev *d, bool dma, uint32_t lba, uint32_t count, void *buf, uint16_t bcl,
                struct ata_result *r);
/* READ CAPACITY into d->cd_blocks / d->cd_block_size. */
bool atapi_read_capacity(struct ata_dev *d, struct ata_result *r);

/* Builds a PRD table for [addr, addr + len) (entries split at 64 KiB boundaries); returns the
 * number of entries (0: does not fit in max). */
unsigned ata_prd_build(uint32_t *prd, unsigned max, uint64_t addr, uint32_t len);
/* Clears the bus master, SRSTs the channel and waits for the devices: after errors. */
void ata_recover(struct ata_chan *ch);

/* Text helpers (static buffers: use one per printf argument list at most of each kind). */
const char *ata_status_str(uint8_t status);
const char *ata_error_str(uint8_t error);
const char *ata_bm_str(uint8_t bm);
const char *ata_class_str(enum ata_class c);
const char *ata_sense_str(uint8_t key, uint8_t asc, uint8_t ascq);
/* "status 0x51 (DRDY DSC ERR) error 0x04 (ABRT)" plus sense / BM / timeout as they apply. */
const char *ata_result_str(const struct ata_result *r);
/* Port read/write counters (for reporting the cost of a phase). */
extern uint64_t ata_port_reads, ata_port_writes, ata_string_ops;

#endif /* TESTS_GUEST_ATA_H_ */
