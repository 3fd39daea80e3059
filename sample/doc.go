// Package sample holds the data every stage of persyst shares: a job's samples and
// summary as the node measures them, per-CPU values and the CPUs' topology, the metric
// vocabulary (names, kinds, units), and the kernel's CPU-list format.
//
// It is a leaf: it reads nothing and imports none of persyst's readers, so the property
// engine, the digest and the agent tree can use these types without the node's
// measurement code. The measurement side (daemon/measure) produces Samples; the property
// engine (properties) evaluates them; the digest (digest) reports on them.
package sample
