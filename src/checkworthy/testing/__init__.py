"""Stand-ins and fixtures shared by the tests and the benchmarks (as ``numpy.testing``): fake model
servers speaking the real wire protocols, the raw datasets, scratch projects. Nothing else in the
package imports it.
"""
