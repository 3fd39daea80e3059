// Package jobmap will hold the cluster's job → nodes/CPUs map and job facts from
// slurmrestd (generated client) with an scontrol fallback, hostlist expansion and output
// path patterns (issue 4). Nothing is implemented here yet.
package jobmap
