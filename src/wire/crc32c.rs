//! CRC-32C (Castagnoli), for OP_MSG's optional checksum. Bitwise table, built at compile time.

const POLY: u32 = 0x82F6_3B78; // reversed Castagnoli polynomial

const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

pub fn checksum(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vectors() {
        // RFC 3720 B.4 test vectors.
        assert_eq!(super::checksum(b"123456789"), 0xE306_9283);
        assert_eq!(super::checksum(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(super::checksum(&[0xffu8; 32]), 0x62A8_AB43);
    }
}
