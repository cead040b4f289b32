//! The metastore codecs as specifications: generated values of every type
//! ([`strategies`]), properties of every codec ([`properties`]), named
//! behaviours with golden bytes ([`named`]), and the size and speed of a
//! large state ([`measure`], ignored by default).

mod measure;
mod named;
mod properties;
mod remote_strategies;
mod strategies;
