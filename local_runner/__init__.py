"""local_runner"""
