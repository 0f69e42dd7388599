//! Prefix-cache keys: a chained hash of each full block's token ids.
//!
//! The hash of block `i` covers its parent's hash, its tokens and optional extra keys (a cache
//! salt on the first block), so equal hashes mean equal prefixes up to and including that block.
//! 128 bits (two independently keyed SipHash runs) make an accidental collision negligible.

use std::hash::{DefaultHasher, Hash, Hasher};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

pub fn hash_block_tokens(parent: Option<BlockHash>, tokens: &[u32], extra: Option<&str>) -> BlockHash {
    let half = |seed: u64| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        parent.hash(&mut h);
        tokens.hash(&mut h);
        extra.hash(&mut h);
        h.finish()
    };
    BlockHash(((half(0x9e37_79b9_7f4a_7c15) as u128) << 64) | half(0xc2b2_ae3d_27d4_eb4f) as u128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_and_salt_change_the_hash() {
        let a = hash_block_tokens(None, &[1, 2, 3], None);
        assert_eq!(a, hash_block_tokens(None, &[1, 2, 3], None));
        assert_ne!(a, hash_block_tokens(None, &[1, 2, 4], None));
        assert_ne!(a, hash_block_tokens(None, &[1, 2, 3], Some("tenant")));
        let b = hash_block_tokens(Some(a), &[4, 5, 6], None);
        let c = hash_block_tokens(Some(hash_block_tokens(None, &[9, 9, 9], None)), &[4, 5, 6], None);
        assert_ne!(b, c, "same tokens after a different prefix must not collide");
    }
}
