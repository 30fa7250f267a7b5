//! The load-balanced presentation (Load Balancer spec): one address standing for
//! a load balancer in front of mongoses. Its `hello` is a mongos's plus the
//! `serviceId` of the mongos behind it, and only drivers in load-balanced mode
//! (`loadBalanced: true` in their hello) are let through, as a load balancer
//! port of mongos does.

use bson::{oid::ObjectId, Document};

use crate::codes;

/// What the hello of a connection through the load balancer answers: `reply`
/// (a mongos's) with `serviceId`, or a refusal of a driver not in load-balanced mode.
pub(crate) fn hello(body: &Document, service_id: ObjectId, mut reply: Document) -> Document {
    if !body.get_bool("loadBalanced").unwrap_or(false) {
        return codes::error_doc(
            codes::BAD_VALUE,
            "this address is a load balancer: only drivers in load-balanced mode \
             (hello with loadBalanced: true) may connect",
        );
    }
    reply.insert("serviceId", service_id);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn only_load_balanced_drivers_get_a_service_id() {
        let id = ObjectId::new();
        let reply = doc! { "msg": "isdbgrid", "ok": 1.0 };
        let lb = hello(
            &doc! { "hello": 1, "loadBalanced": true },
            id,
            reply.clone(),
        );
        assert_eq!(lb.get_object_id("serviceId").ok(), Some(id));
        let plain = hello(&doc! { "hello": 1 }, id, reply);
        assert_eq!(plain.get_i32("code").ok(), Some(codes::BAD_VALUE));
        assert!(!plain.contains_key("serviceId"));
    }
}
