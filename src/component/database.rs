use super::collection::{aggregate_parts, CollectionRes, CursorRes};
use super::face::collection::{AggregateOptions, Collection, OpOptions};
use super::face::cursor::Cursor as WitCursor;
use super::face::database::{
    self as wit_database, BucketOptions, CollectionOptions, GuestDatabase, RunCommandOptions,
};
use super::face::gridfs::Bucket;
use super::gridfs::BucketRes;
use super::session::SessionRes;
use super::{doc, docs, opt_doc, wrap, Component, WitResult};
use crate::Database;
use bson::rawdoc;

pub struct DatabaseRes(pub Database);

impl wit_database::Guest for Component {
    type Database = DatabaseRes;
}

impl GuestDatabase for DatabaseRes {
    fn name(&self) -> String {
        self.0.name().to_string()
    }

    fn collection(&self, name: String, options: CollectionOptions) -> Collection {
        let (rc, bad_rc) = super::option_doc(options.read_concern);
        let (wc, bad_wc) = super::option_doc(options.write_concern);
        let (rp, bad_rp) = super::option_read_preference(options.read_preference);
        let coll = self
            .0
            .collection(&name, options.timeout_ms)
            .with_concerns(rc, wc)
            .with_read_preference(rp);
        let bad = bad_rc.or(bad_wc).or(bad_rp);
        Collection::new(CollectionRes(coll.poisoned(bad)))
    }

    fn gridfs_bucket(&self, options: BucketOptions) -> Bucket {
        let opts = crate::gridfs::BucketOptions {
            bucket_name: options.bucket_name,
            chunk_size_bytes: options.chunk_size_bytes,
            timeout_ms: options.timeout_ms,
        };
        Bucket::new(BucketRes(self.0.gridfs_bucket(opts)))
    }

    io! {
        fn run_command(
            &self,
            command: Vec<u8>,
            options: RunCommandOptions<'_>,
        ) -> WitResult<Vec<u8>> {
            let session = options.session.as_ref().map(|s| &s.get::<SessionRes>().0);
            let run = crate::RunCommandOptions {
                timeout_ms: options.timeout_ms,
                session,
                read_preference: options
                    .read_preference
                    .as_ref()
                    .map(super::read_preference)
                    .transpose()?,
            };
            Ok(wrap(self.0.run_command(doc(command)?, &run).await)?.into_bytes())
        }
    }

    io! {
        fn run_cursor_command(
            &self,
            command: Vec<u8>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (o, batch_size, mode) = aggregate_parts(&options)?;
            let cursor = wrap(
                self.0
                    .run_cursor_command(doc(command)?, batch_size, &o, mode)
                    .await,
            )?;
            Ok(CursorRes::wit(cursor))
        }
    }

    io! {
        fn list_collections(
            &self,
            filter: Vec<u8>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (o, batch_size, mode) = aggregate_parts(&options)?;
            let cursor = wrap(
                self.0
                    .list_collections(doc(filter)?, batch_size, &o, mode)
                    .await,
            )?;
            Ok(CursorRes::wit(cursor))
        }
    }

    io! {
        fn list_collection_names(
            &self,
            filter: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<String>> {
            let opts = super::collection::op_options(&options)?;
            wrap(self.0.list_collection_names(doc(filter)?, &opts).await)
        }
    }

    io! {
        fn create_collection(&self, name: String, options: OpOptions<'_>) -> WitResult<Collection> {
            let session = options.session.as_ref().map(|s| &s.get::<SessionRes>().0);
            let mut cmd = rawdoc! { "create": name.as_str() };
            wrap(crate::operation::merge_extra(
                &mut cmd,
                opt_doc(options.extra)?.as_deref(),
            ))?;
            let run = crate::RunCommandOptions {
                timeout_ms: options.timeout_ms,
                session,
                read_preference: None,
            };
            wrap(self.0.run_command(cmd, &run).await)?;
            Ok(Collection::new(CollectionRes(
                self.0.collection(&name, None),
            )))
        }
    }

    io! {
        fn drop(&self, options: OpOptions<'_>) -> WitResult<()> {
            let session = options.session.as_ref().map(|s| &s.get::<SessionRes>().0);
            wrap(self.0.drop(options.timeout_ms, session).await)
        }
    }

    io! {
        fn aggregate(
            &self,
            pipeline: Vec<Vec<u8>>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (o, batch_size, mode) = aggregate_parts(&options)?;
            let cursor = wrap(
                self.0
                    .aggregate(&docs(pipeline)?, batch_size, &o, mode)
                    .await,
            )?;
            Ok(CursorRes::wit(cursor))
        }
    }

    io! {
        fn watch(
            &self,
            pipeline: Vec<Vec<u8>>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = aggregate_parts(&options)?;
            wrap(crate::change_stream::refuse_timeout_mode(mode))?;
            Ok(CursorRes::wit(wrap(
                self.0.watch(&docs(pipeline)?, batch_size, &opts).await,
            )?))
        }
    }
}
