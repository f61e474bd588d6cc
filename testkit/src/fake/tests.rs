//! Scripted-request tests of the cluster state: no socket, no clock.
